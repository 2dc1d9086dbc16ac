"""Bad input: schema violations, semantically invalid KfDefs, generated (hypothesis) specs, hostile manifests.

Hostile archives (path traversal, absolute paths, symlinks and hard links leaving the tree, devices and fifos,
decompression bombs, file-count and per-file size limits) are covered at the unit level in
``tests/unit/test_sources.py`` (``test_unsafe_archives_are_refused``, ``test_decompression_bomb_and_file_limits``).
"""

from __future__ import annotations

import collections
import copy
import os
import time
import uuid
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st
from kubernetes.client.rest import ApiException

from kfdef_operator.runtime.inventory import read as read_inventory
from kfdef_operator.runtime.ownership import INSTANCE_ANNOTATION, INSTANCE_LABEL
from tests.cluster.conftest import KFDEF_API, kfdef_status, wait_condition_reason
from tests.kube import wait_for
from tests.operator_process import OperatorProcess
from tests.reliability.support import LogWindow, TarballServer, condition, delete_kfdefs, wait_ready
from tests.stacks import Stack, write_package

pytestmark = pytest.mark.cluster

FUZZ_SPECS = int(os.environ.get("KFDEF_FUZZ_SPECS", "300"))
FUZZ_SEED = int(os.environ.get("KFDEF_FUZZ_SEED", "20251"))
FUZZ_BATCH = 100
FUZZ_NAMESPACES = 3
TERMINAL_DEADLINE_S = 180


def _kfdef(name: str, namespace: str, spec: dict, api_version: str = KFDEF_API) -> dict:
    return {"apiVersion": api_version, "kind": "KfDef", "metadata": {"name": name, "namespace": namespace},
            "spec": spec}


# --- schema violations: the API server refuses them -----------------------------------------------------------

SCHEMA_VIOLATIONS = {
    "applications is a string": ({"applications": "all of them"}, "spec.applications"),
    "application without a name (v1)": (
        {"applications": [{"kustomizeConfig": {"repoRef": {"name": "manifests", "path": "a"}}}]},
        "spec.applications[0].name"),
    "repo without a uri": ({"repos": [{"name": "manifests"}]}, "spec.repos[0].uri"),
    "parameter value is a number": (
        {"applications": [{"name": "a", "kustomizeConfig": {"parameters": [{"name": "n", "value": 3}]}}]},
        "spec.applications[0].kustomizeConfig.parameters[0].value"),
}


@pytest.mark.parametrize("case", sorted(SCHEMA_VIOLATIONS))
def test_schema_violations_are_refused_by_the_crd_with_the_field(kfdef_crd, kube, kfdef_namespace, case, reliability):
    """Schema-violating KfDef refused by the CRD's validation"""
    spec, field = SCHEMA_VIOLATIONS[case]
    with pytest.raises(ApiException) as caught:
        kube.resource(KFDEF_API, "KfDef").create(body=_kfdef("schema", kfdef_namespace, spec),
                                                 namespace=kfdef_namespace)
    assert caught.value.status == 422, caught.value
    assert field in caught.value.body, caught.value.body
    assert not kube.exists(KFDEF_API, "KfDef", "schema", kfdef_namespace)
    reliability.figure("field in the message", field)


# --- semantically invalid: Degraded with the exact field path -------------------------------------------------

def _semantic_cases(root: Path) -> dict[str, tuple[dict, str, str]]:
    repos = [{"name": "manifests", "uri": str(root)}]

    def app(name: str, path: str = "pkg", repo: str = "manifests", **config) -> dict:
        return {"name": name, "kustomizeConfig": {"repoRef": {"name": repo, "path": path}, **config}}
    return {
        "unknown repo": ({"repos": repos, "applications": [app("a", repo="nope")]}, "InvalidSpec",
                         "spec.applications[0].kustomizeConfig.repoRef.name"),
        "duplicate application names": ({"repos": repos, "applications": [app("a"), app("a")]}, "InvalidSpec",
                                        "spec.applications[1].name: duplicate application name 'a'"),
        "missing overlay": ({"repos": repos, "applications": [app("a"), app("b", overlays=["prod", "nope"])]},
                            "RenderFailed", "overlay 'nope' does not exist in pkg/overlays/ (available: prod); "
                            "fix spec.applications[1].kustomizeConfig.overlays[1]"),
        "empty path": ({"repos": repos, "applications": [app("a", path="")]}, "InvalidSpec",
                       "spec.applications[0].kustomizeConfig.repoRef.path: is required"),
        "unsupported URI scheme": ({"repos": [{"name": "manifests", "uri": "ftp://example.invalid/m.tar.gz"}],
                                    "applications": [app("a")]}, "InvalidSpec",
                                   "spec.repos[0].uri: unsupported URI scheme 'ftp'"),
    }


@pytest.fixture
def small_repo(tmp_path) -> Path:
    root = tmp_path / "small"
    write_package(root, "pkg", [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "small"}}],
                  overlays={"prod": {"commonLabels": {"env": "prod"}}})
    return root


def test_semantically_invalid_kfdefs_are_degraded_with_the_field_path(operator, kube, kfdef_namespace, small_repo,
                                                                      new_stack, reliability):
    """Semantically invalid KfDefs get Degraded with the exact field path and an Event; a valid one stays Ready"""
    valid = new_stack(namespace=kfdef_namespace, with_webhook=False)
    kube.apply(valid.kfdef("valid", kfdef_namespace))
    wait_ready(kube, "valid", kfdef_namespace)
    before = condition(kube.get(KFDEF_API, "KfDef", "valid", kfdef_namespace), "Ready")
    cases = _semantic_cases(small_repo)
    for index, (spec, _, _) in enumerate(cases.values()):
        kube.apply(_kfdef(f"invalid-{index}", kfdef_namespace, spec))
    for index, (case, (_, reason, words)) in enumerate(cases.items()):
        obj = wait_condition_reason(kube, f"invalid-{index}", kfdef_namespace, "Degraded", "True", reason, timeout=60)
        assert words in condition(obj, "Degraded")["message"], (case, condition(obj, "Degraded"))
        assert condition(obj, "Ready")["status"] == "False"
        selector = f"involvedObject.name=invalid-{index}"
        wait_for(lambda: any(e.reason == reason and words in e.message  # noqa: B023 (used within the iteration)
                             for e in kube.core.list_namespaced_event(kfdef_namespace, field_selector=selector).items),
                 timeout=15, what=f"a {reason} Event naming {words!r} ({case})")
        reliability.scenario(f"semantically invalid: {case}").figures = {"reason": reason, "message has": words}
    after = condition(kube.get(KFDEF_API, "KfDef", "valid", kfdef_namespace), "Ready")
    assert after["status"] == "True" and after["lastTransitionTime"] == before["lastTransitionTime"]
    delete_kfdefs(kube, kfdef_namespace)


# --- property-based: generated specs against the running operator ---------------------------------------------

# Placeholders filled per KfDef: {repo} its own generated repo, {http} a 404 on the local server.
REPO_URIS = ["file://{repo}", "{repo}", "file:///nonexistent/repo", "ftp://example.invalid/m.tar.gz", "https://",
             "http://127.0.0.1:{port}/missing.tar.gz", "git+file:///nonexistent/repo.git", "mailto:x@example.invalid",
             ""]
PATHS = ["a", "b", "c", "c/", "./a", "nope", "../a", "/abs/a", "", "a/../b", ".", "a/base"]
OVERLAYS = ["prod", "missing", "../prod", "", "prod/x"]
NAMES = ["a", "b", "c", "app", "kubeflow-apps", "UPPER", "under_score", "-dash", "x" * 70, ""]
json_leaves = (st.none() | st.booleans() | st.integers(-(2 ** 53), 2 ** 53) | st.text(max_size=12)
               | st.floats(allow_nan=False, allow_infinity=False, width=32))
json_values = st.recursive(json_leaves, lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=8)
text = st.text(max_size=16)


def _wild_spec(draw) -> dict:
    """Anything the strategies allow: names, refs, paths, overlays and URIs, valid or not."""
    repos = draw(st.lists(st.fixed_dictionaries({
        "name": st.sampled_from(["manifests", "manifests", "extra", ""]) | text,
        "uri": st.sampled_from(REPO_URIS) | text}), max_size=3))
    parameters = st.lists(st.fixed_dictionaries({"name": st.sampled_from(["mode", "namespace"]) | text},
                                                optional={"value": text | st.sampled_from(["fz-missing", "OFF"])}),
                          max_size=3)
    config = st.fixed_dictionaries({}, optional={
        "repoRef": st.fixed_dictionaries({}, optional={"name": st.sampled_from(["manifests", "extra", "nope"]),
                                                       "path": st.sampled_from(PATHS) | text}),
        "overlays": st.lists(st.sampled_from(OVERLAYS) | text, max_size=2),
        "parameters": parameters})
    applications = draw(st.lists(st.fixed_dictionaries(
        {"name": st.sampled_from(NAMES) | text}, optional={"kustomizeConfig": config}), max_size=4))
    return {"repos": repos, "applications": applications}


def _plausible_spec(draw) -> dict:
    """Well-formed and mostly valid: one good repo (plus maybe a failing one), distinct names, known packages;
    what still goes wrong happens later (missing package or overlay, unreachable repo, odd parameters)."""
    repos = [{"name": "manifests", "uri": draw(st.sampled_from(["file://{repo}", "{repo}"]))}]
    if draw(st.integers(0, 4)) == 0:
        repos.append({"name": "extra", "uri": draw(st.sampled_from(REPO_URIS[2:]))})
    applications = []
    for index, path in enumerate(draw(st.lists(st.sampled_from(["a", "b", "c", "c", "./a", "nope"]), min_size=1,
                                               max_size=3))):
        config: dict = {"repoRef": {"name": draw(st.sampled_from(["manifests"] * 5 + [repos[-1]["name"]])),
                                    "path": path}}
        if draw(st.booleans()):
            config["overlays"] = draw(st.lists(st.sampled_from(["prod", "prod", "missing"]), max_size=1))
        if draw(st.booleans()):
            config["parameters"] = draw(st.lists(st.fixed_dictionaries({
                "name": st.sampled_from(["mode", "mode", "unused"]) | text,
                "value": st.sampled_from(["fast", "", "OFF"]) | text}), max_size=2))
        applications.append({"name": f"{draw(st.sampled_from(['a', 'app', 'kf']))}{index}", "kustomizeConfig": config})
    return {"repos": repos, "applications": applications}


@st.composite
def kfdef_specs(draw) -> tuple[str, dict]:
    """(apiVersion, spec): mostly plausible, a quarter wild; plugins, secrets and wrong types on top."""
    spec = _wild_spec(draw) if draw(st.integers(0, 3)) == 0 else _plausible_spec(draw)
    if draw(st.booleans()):
        spec["plugins"] = draw(st.lists(st.fixed_dictionaries(
            {"kind": text, "metadata": st.fixed_dictionaries({"name": text}),
             "spec": st.dictionaries(st.text(max_size=8), json_values, max_size=3)}), max_size=2))
    if draw(st.booleans()):
        source = st.one_of(st.fixed_dictionaries({"literalSource": st.fixed_dictionaries({"value": text})}),
                           st.fixed_dictionaries({"envSource": st.fixed_dictionaries({"name": text})}),
                           st.just({}))
        spec["secrets"] = draw(st.lists(st.fixed_dictionaries({"name": text, "secretSource": source}), max_size=2))
    if draw(st.integers(0, 9)) == 0:  # now and then a type the schema refuses
        spec[draw(st.sampled_from(["version", "applications", "repos"]))] = draw(json_leaves)
    elif draw(st.booleans()):
        spec["version"] = draw(text)
    api_version = draw(st.sampled_from([KFDEF_API] * 4 + ["kfdef.apps.kubeflow.org/v1beta1"]))
    return api_version, spec


def generate_specs(count: int, seed_value: int) -> list[tuple[str, dict]]:
    """``count`` specs drawn by hypothesis (generation only: every spec is judged by the cluster afterwards)."""
    drawn: list[tuple[str, dict]] = []

    @seed(seed_value)
    @settings(max_examples=count, phases=[Phase.generate], database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(kfdef_specs())
    def collect(example):
        drawn.append(copy.deepcopy(example))
    collect()
    return drawn


def _write_fuzz_repo(root: Path, prefix: str) -> None:
    """Packages a, b (with params.env) and c (with overlay prod), rendering ConfigMaps named after ``prefix``."""
    def package(path: str, params: bool = False, overlay: bool = False) -> None:
        base = root / path / "base"
        base.mkdir(parents=True)
        (base / "cm.yaml").write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap",
                                                      "metadata": {"name": f"{prefix}-{path}"}, "data": {"p": path}}))
        kustomization: dict = {"resources": ["cm.yaml"]}
        if params:
            (base / "params.env").write_text("mode=default\n")
            kustomization["configMapGenerator"] = [{"name": f"{prefix}-{path}-params", "envs": ["params.env"]}]
            kustomization["generatorOptions"] = {"disableNameSuffixHash": True}
        (base / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
        if overlay:
            (root / path / "overlays" / "prod").mkdir(parents=True)
            (root / path / "overlays" / "prod" / "kustomization.yaml").write_text(
                yaml.safe_dump({"bases": ["../../base"], "commonLabels": {"env": "prod"}}))
    package("a")
    package("b", params=True)
    package("c", overlay=True)


def _materialise(spec: dict, repo: Path, port: int) -> dict:
    text = yaml.safe_dump(spec)
    for placeholder, value in (("{repo}", str(repo)), ("{port}", str(port))):
        text = text.replace(placeholder, value)
    return yaml.safe_load(text)


def _terminal(obj: dict) -> str | None:
    """Ready for its generation, or Degraded with a reason for its generation; None while neither."""
    generation = obj["metadata"].get("generation")
    ready, degraded = condition(obj, "Ready"), condition(obj, "Degraded")
    if ready.get("status") == "True" and ready.get("observedGeneration") == generation:
        return "Ready"
    if degraded.get("status") == "True" and degraded.get("reason") and degraded.get("observedGeneration") == generation:
        return f"Degraded/{degraded['reason']}"
    return None


def test_generated_specs_never_crash_or_stall_the_operator(operator, kube, kfdef_namespace, new_stack, tmp_path,
                                                           reliability):
    """Hypothesis-generated KfDef specs against the running operator and the real API server"""
    specs = generate_specs(FUZZ_SPECS, FUZZ_SEED)
    assert len(specs) >= FUZZ_SPECS
    namespaces = [kfdef_namespace] + [f"{kfdef_namespace}-{i}" for i in range(1, FUZZ_NAMESPACES)]
    for ns in namespaces[1:]:
        kube.create_namespace(ns)
    sentinel = new_stack(with_webhook=False)
    kube.apply(sentinel.kfdef("sentinel", kfdef_namespace))
    sentinel_ready = condition(wait_ready(kube, "sentinel", kfdef_namespace), "Ready")
    server = TarballServer()  # answers 404 to everything: a fast permanent source failure
    log = LogWindow(operator.log_path)
    outcomes: collections.Counter[str] = collections.Counter()
    rejected: collections.Counter[int] = collections.Counter()
    settle_times = []
    try:
        for start in range(0, len(specs), FUZZ_BATCH):
            created: dict[tuple[str, str], int] = {}
            for index in range(start, min(start + FUZZ_BATCH, len(specs))):
                api_version, spec = specs[index]
                ns, name = namespaces[index % len(namespaces)], f"fz{index}"
                repo = tmp_path / "fuzz" / name
                _write_fuzz_repo(repo, name)
                try:
                    body = _kfdef(name, ns, _materialise(spec, repo, server.port), api_version)
                    obj = kube.resource(api_version, "KfDef").create(body=body, namespace=ns).to_dict()
                except ApiException as error:
                    assert 400 <= error.status < 500, f"spec {index} broke the API server: {error}"
                    assert "spec" in (error.body or ""), error.body
                    rejected[error.status] += 1
                    continue
                created[(ns, name)] = obj["metadata"]["generation"]
            began = time.monotonic()
            pending = dict(created)

            def settled() -> bool:
                for ns in namespaces:
                    for item in kube.resource(KFDEF_API, "KfDef").get(namespace=ns).items:
                        obj = item.to_dict()
                        key = (ns, obj["metadata"]["name"])
                        if key in pending and _terminal(obj):
                            outcomes[_terminal(obj).split(":")[0]] += 1
                            del pending[key]
                return not pending
            try:
                wait_for(settled, timeout=TERMINAL_DEADLINE_S, what="every generated KfDef Ready or Degraded")
            except AssertionError:
                stuck = {f"{ns}/{name}": specs[int(name[2:])] for ns, name in list(pending)[:5]}
                raise AssertionError(f"{len(pending)} KfDef(s) stuck (neither Ready nor Degraded for their generation)"
                                     f"; first specs: {stuck}\n{operator.log_tail(60)}") from None
            settle_times.append(time.monotonic() - began)
            assert operator.popen.poll() is None, f"the operator died:\n{operator.log_tail(80)}"
            for ns in namespaces:
                delete_kfdefs(kube, ns, [name for (n, name) in created if n == ns], timeout=TERMINAL_DEADLINE_S)
        after = condition(kube.get(KFDEF_API, "KfDef", "sentinel", kfdef_namespace), "Ready")
        assert after["status"] == "True" and after["lastTransitionTime"] == sentinel_ready["lastTransitionTime"]
        crashes = log.text().count("Traceback")
        assert crashes == 0, f"{crashes} unhandled exception(s) in the operator log:\n{log.text()[-8000:]}"
    finally:
        server.close()
        for ns in namespaces[1:]:
            delete_kfdefs(kube, ns)
            kube.delete_namespace(ns)
    reliability.runs = len(specs)
    reliability.figure("seed", FUZZ_SEED)
    reliability.figure("rejected at admission", sum(rejected.values()))
    reliability.figure("terminal conditions", dict(sorted(outcomes.items())))
    reliability.figure(f"median s for a batch of {FUZZ_BATCH} to settle",
                       round(sorted(settle_times)[len(settle_times) // 2], 1))
    reliability.figure("operator crashes / stuck reconciles", 0)


# --- hostile manifests -----------------------------------------------------------------------------------------

def _one_app_kfdef(name: str, namespace: str, root: Path) -> dict:
    stack = Stack(root, "", namespace, "", [{"name": "app", "kustomizeConfig": {"repoRef": {"name": "manifests",
                                                                                            "path": "app"}}}])
    return stack.kfdef(name, namespace)


def test_a_manifest_claiming_another_kfdefs_object_cannot_take_it(operator, kube, kfdef_namespace, tmp_path,
                                                                  reliability):
    """A rendered object carrying another KfDef's ownership stamps"""
    ns = kfdef_namespace
    owner_stamps = {"annotations": {INSTANCE_ANNOTATION: f"owner.{ns}"}, "labels": {INSTANCE_LABEL: f"{ns}.owner"}}
    write_package(tmp_path / "owner", "app", [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "shared"},
                                                "data": {"by": "owner"}}])
    write_package(tmp_path / "thief", "app", [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "shared", **copy.deepcopy(owner_stamps)},
         "data": {"by": "thief"}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "fresh", **copy.deepcopy(owner_stamps)},
         "data": {"by": "thief"}}])
    kube.apply(_one_app_kfdef("owner", ns, tmp_path / "owner"))
    wait_ready(kube, "owner", ns)
    kube.apply(_one_app_kfdef("thief", ns, tmp_path / "thief"))
    status = wait_condition_reason(kube, "thief", ns, "Degraded", "True", "ApplyFailed", timeout=60)["status"]
    assert [(f["object"], f"already managed by KfDef {ns}/owner" in f["message"]) for f in status["failures"]] == [
        (f"ConfigMap {ns}/shared", True)]
    shared = kube.get("v1", "ConfigMap", "shared", ns)
    assert shared["data"] == {"by": "owner"} and shared["metadata"]["annotations"][INSTANCE_ANNOTATION] == f"owner.{ns}"
    # A new object claiming the other KfDef's stamps is stamped as the applier's own.
    fresh = kube.get("v1", "ConfigMap", "fresh", ns)
    assert fresh["metadata"]["annotations"][INSTANCE_ANNOTATION] == f"thief.{ns}"
    assert fresh["metadata"]["labels"][INSTANCE_LABEL] == f"{ns}.thief"
    assert {held.ref.id for held in read_inventory(kfdef_status(kube, "owner", ns))} == {f"{ns}_shared__ConfigMap"}

    kube.delete(KFDEF_API, "KfDef", "thief", ns)
    kube.wait_gone(KFDEF_API, "KfDef", "thief", ns, timeout=60)
    kube.wait_gone("v1", "ConfigMap", "fresh", ns, timeout=30)
    assert kube.get("v1", "ConfigMap", "shared", ns)["data"] == {"by": "owner"}
    assert condition(kube.get(KFDEF_API, "KfDef", "owner", ns), "Ready")["status"] == "True"
    reliability.figure("conflicts reported", len(status["failures"]))


def test_a_namespace_scoped_operator_does_not_touch_other_namespaces(operator, control_plane, kube, kfdef_namespace,
                                                                    tmp_path, reliability):
    """A namespace-scoped operator and a manifest aimed at a namespace outside its scope"""
    other = f"{kfdef_namespace}-other"
    kube.create_namespace(other)
    write_package(tmp_path / "repo", "inside", [{"apiVersion": "v1", "kind": "ConfigMap",
                                                 "metadata": {"name": "inside"}}])
    write_package(tmp_path / "repo", "outside", [{"apiVersion": "v1", "kind": "ConfigMap",
                                                  "metadata": {"name": "outside"}}])
    stack = Stack(tmp_path / "repo", "", kfdef_namespace, "", [
        {"name": "inside", "kustomizeConfig": {"repoRef": {"name": "manifests", "path": "inside"}}},
        {"name": "outside", "kustomizeConfig": {"repoRef": {"name": "manifests", "path": "outside"},
                                                "parameters": [{"name": "namespace", "value": other}]}}])
    # Isolation: the package's all-namespaces operator is stopped while a scoped one runs.
    operator.stop()
    scoped = OperatorProcess(control_plane.kubeconfig, tmp_path / f"scoped-{uuid.uuid4().hex[:6]}",
                             extra_args=("--namespace", kfdef_namespace))
    scoped.start()
    try:
        kube.apply(stack.kfdef("scoped", kfdef_namespace))
        wait_for(lambda: kfdef_status(kube, "scoped", kfdef_namespace).get("summary"), timeout=60,
                 what="the scoped operator's verdict")
        wait_for(lambda: kube.exists("v1", "ConfigMap", "inside", kfdef_namespace), timeout=30, what="inside applied")
        leaked = kube.exists("v1", "ConfigMap", "outside", other)
        reported = kfdef_status(kube, "scoped", kfdef_namespace).get("failures") or []
        failures = [f["object"] for f in reported]
        assert not leaked and failures == [f"ConfigMap {other}/outside"], (
            f"BUG: an operator scoped with --namespace {kfdef_namespace} applied ConfigMap {other}/outside "
            f"(exists: {leaked}; failures reported: {failures}); it must refuse and report namespaced objects outside "
            "the namespaces it serves (today only RBAC could stop it)")
        assert "outside this operator's scope" in reported[0]["message"], reported
        reliability.figure("reported", reported[0]["message"].replace(kfdef_namespace, "<ns>"))
        kube.delete(KFDEF_API, "KfDef", "scoped", kfdef_namespace)
        kube.wait_gone(KFDEF_API, "KfDef", "scoped", kfdef_namespace, timeout=60)
    finally:
        scoped.stop()
        operator.start()
        kube.delete_namespace(other)
