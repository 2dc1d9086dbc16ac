"""Upgraded legacy objects against the real kube-apiserver (issue 6, live part).

Every object of ``tests/fixtures/upgrade/*.before.yaml`` is upgraded for the running server (its served API
versions read from live discovery, which must agree with the offline ``served_for_release`` table), then applied
with server-side dry-run and for real; CRDs must become Established and serve custom resources that are pruned or
kept as their converted schema says. A kfctl v1.0-style stack (``tests/fixtures/legacy-stack``) then deploys
through a KfDef with the running operator.

The control plane is shared by the whole session: every object gets a unique name (CRDs and APIServices a unique
group), webhook configurations are rewritten to match a group nothing uses, and everything cluster-scoped is
deleted at the end of its test.
"""

from __future__ import annotations

import copy
import re
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes.client.rest import ApiException

from kfdef_operator.runtime.inventory import read as read_inventory
from kfdef_operator.ssa.ordering import install_rank
from kfdef_operator.upgrade.convert import POLICY_ANNOTATION, served_for_release, upgrade_objects
from kfdef_operator.upgrade.structural import PRESERVE
from tests.cluster.conftest import KFDEF_API, wait_condition_reason, wait_ready
from tests.kube import Kube, wait_for

pytestmark = pytest.mark.cluster

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
BEFORE_FILES = sorted((FIXTURES / "upgrade").glob("*.before.yaml"))
LEGACY_STACK = FIXTURES / "legacy-stack"
LEGACY_TOKEN = "sfx000"  # stands for the unique suffix in the legacy stack's cluster-scoped names
CRD_API = "apiextensions.k8s.io/v1"
WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")


def fixture_id(path: Path) -> str:
    return path.name.removesuffix(".before.yaml")


class LiveDiscovery:
    """What the API server serves, read per group-version from its discovery documents (cached)."""

    def __init__(self, kube: Kube) -> None:
        self._kube = kube
        self._documents: dict[str, dict[str, bool] | None] = {}

    def _get(self, path: str) -> dict | None:
        try:
            return self._kube.dynamic.request("GET", path, serializer=lambda _, data: data)
        except ApiException as error:
            if error.status == 404:
                return None
            raise

    def kinds(self, api_version: str) -> dict[str, bool] | None:
        """{kind: namespaced} served under ``api_version``, or None when the group-version is not served."""
        if api_version not in self._documents:
            document = self._get(f"/apis/{api_version}" if "/" in api_version else f"/api/{api_version}")
            self._documents[api_version] = None if document is None else {
                resource["kind"]: resource["namespaced"]
                for resource in document.get("resources") or [] if "/" not in resource["name"]}
        return self._documents[api_version]

    def serves(self, api_version: str, kind: str) -> bool:
        return kind in (self.kinds(api_version) or {})

    def namespaced(self, api_version: str, kind: str) -> bool:
        kinds = self.kinds(api_version) or {}
        assert kind in kinds, f"{kind} {api_version} is not served"
        return kinds[kind]

    def minor(self) -> int:
        return int(re.match(r"\d+", self._get("/version")["minor"]).group())


@pytest.fixture(scope="module")
def discovery(kube: Kube) -> LiveDiscovery:
    return LiveDiscovery(kube)


def load(path: Path) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def create(kube: Kube, obj: dict, **params) -> dict:
    """POST: unlike server-side apply (which refuses fields a schema does not declare), it prunes them."""
    return kube.resource(obj["apiVersion"], obj["kind"]).create(
        body=obj, namespace=obj["metadata"].get("namespace"), **params).to_dict()


def dry_run_apply(kube: Kube, obj: dict) -> dict:
    meta = obj["metadata"]
    return kube.resource(obj["apiVersion"], obj["kind"]).server_side_apply(
        body=obj, name=meta["name"], namespace=meta.get("namespace"), field_manager="tests", force_conflicts=True,
        dry_run="All").to_dict()


# --------------------------------------------------------------------------------------------------------------------
# Making fixture objects safe and unique on a shared control plane


NEVER_MATCHED_GROUP = "never-matched.{suffix}.example.org"


def isolate(obj: dict, suffix: str, namespace: str, namespaced: bool) -> dict:
    """A copy of an upgraded object with a unique identity, in the test namespace when namespaced."""
    out = copy.deepcopy(obj)
    meta = out["metadata"]
    kind, spec = out["kind"], out.get("spec") or {}
    if kind == "CustomResourceDefinition":
        spec["group"] = f"u{suffix}.{spec['group']}"
        meta["name"] = f"{spec['names']['plural']}.{spec['group']}"
    elif kind == "APIService":
        spec["group"] = f"u{suffix}.{spec['group']}"
        meta["name"] = f"{spec['version']}.{spec['group']}"
    else:
        meta["name"] = f"{meta['name']}-{suffix}"
    if kind in WEBHOOK_KINDS:
        for webhook in out.get("webhooks") or []:
            for rule in webhook.get("rules") or []:
                rule["apiGroups"] = [NEVER_MATCHED_GROUP.format(suffix=suffix)]
    if kind == "FlowSchema":
        spec["priorityLevelConfiguration"]["name"] += f"-{suffix}"
    if namespaced:
        meta["namespace"] = namespace
    else:
        meta.pop("namespace", None)
    return out


def assert_cannot_block_the_control_plane(obj: dict, suffix: str) -> None:
    for webhook in obj.get("webhooks") or []:
        groups = {group for rule in webhook.get("rules") or [] for group in rule.get("apiGroups") or []}
        assert webhook.get("failurePolicy") == "Ignore" or groups == {NEVER_MATCHED_GROUP.format(suffix=suffix)}, (
            f"webhook {webhook['name']} could block other tests")


class Created:
    """Objects a test created, deleted at its end: admission objects first, CRDs once their resources are gone."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self.objects: list[tuple[str, str, str, str | None]] = []

    def add(self, obj: dict) -> None:
        meta = obj["metadata"]
        self.objects.append((obj["apiVersion"], obj["kind"], meta["name"], meta.get("namespace")))

    def delete_all(self) -> None:
        ordered = sorted(self.objects, key=lambda o: -install_rank(o[1]))  # admission first, Namespaces/CRDs last
        for api_version, kind, name, namespace in ordered:
            self.kube.delete(api_version, kind, name, namespace)
        for api_version, kind, name, namespace in ordered:
            if namespace is None:  # namespaced objects go with the test namespace
                self.kube.wait_gone(api_version, kind, name, namespace, timeout=90)


@pytest.fixture
def created(kube: Kube) -> Iterator[Created]:
    tracker = Created(kube)
    yield tracker
    tracker.delete_all()


# --------------------------------------------------------------------------------------------------------------------
# Live discovery vs. the offline table


def test_server_is_the_release_the_table_describes(discovery):
    assert discovery.minor() == 36


@pytest.mark.parametrize("before", BEFORE_FILES, ids=fixture_id)
def test_live_discovery_agrees_with_the_table_for_every_kind_involved(discovery, before):
    objects = load(before)
    table = served_for_release(f"1.{discovery.minor()}")
    upgraded = upgrade_objects(objects, table).objects
    pairs = {(o["apiVersion"], o["kind"]) for o in objects + upgraded}
    disagreements = {pair: (discovery.serves(*pair), table(*pair)) for pair in pairs
                     if discovery.serves(*pair) != table(*pair)}
    assert disagreements == {}, "(apiVersion, kind): (live, table)"
    assert not any(discovery.serves(o["apiVersion"], o["kind"]) for o in objects), "fixtures hold only removed versions"


# --------------------------------------------------------------------------------------------------------------------
# Round trip of every conversion fixture


def expect_unknown_field_kept(schema: dict) -> bool:
    """Whether the schema keeps an unknown field under ``spec`` (structural pruning rules)."""
    spec = (schema.get("properties") or {}).get("spec")
    if spec is None:
        return bool(schema.get(PRESERVE))
    return bool(spec.get(PRESERVE))


def probe_custom_resource(kube: Kube, crd: dict, namespace: str, suffix: str, created: Created) -> None:
    spec = crd["spec"]
    (storage,) = [v for v in spec["versions"] if v["storage"]]
    schema = storage["schema"]["openAPIV3Schema"]
    api_version = f"{spec['group']}/{storage['name']}"
    namespaced = spec.get("scope", "Namespaced") == "Namespaced"
    resource = {"apiVersion": api_version, "kind": spec["names"]["kind"],
                "metadata": {"name": f"probe-{suffix}", **({"namespace": namespace} if namespaced else {})},
                "spec": {"probeUnknownField": "x"}}
    create(kube, resource, dry_run="All")
    live = create(kube, resource)
    created.add(resource)
    kept = "probeUnknownField" in (live.get("spec") or {})
    assert kept == expect_unknown_field_kept(schema), (
        f"{crd['metadata']['name']}: unknown spec field {'kept' if kept else 'pruned'} against its schema")
    assert live["metadata"]["uid"]


@pytest.mark.parametrize("before", BEFORE_FILES, ids=fixture_id)
def test_every_upgraded_object_is_accepted_by_the_server(kube, discovery, namespace, created, before):
    suffix = uuid.uuid4().hex[:6]
    objects = load(before)
    result = upgrade_objects(objects, discovery.serves)
    assert result.unserved == []
    assert len(result.upgraded) == len(objects)
    assert result.objects == upgrade_objects(objects, served_for_release("1.36")).objects, (
        "live discovery and the offline table must produce the same conversion")

    for upgraded in sorted(result.objects, key=lambda o: install_rank(o["kind"])):
        namespaced = discovery.namespaced(upgraded["apiVersion"], upgraded["kind"])
        obj = isolate(upgraded, suffix, namespace, namespaced)
        assert_cannot_block_the_control_plane(obj, suffix)
        what = f"{obj['kind']} {obj['metadata']['name']} ({obj['apiVersion']})"

        dry = dry_run_apply(kube, obj)
        assert dry["metadata"]["name"] == obj["metadata"]["name"], what
        assert not kube.exists(obj["apiVersion"], obj["kind"], obj["metadata"]["name"],
                               obj["metadata"].get("namespace")), f"dry-run created {what}"

        live = kube.apply(obj)
        created.add(obj)
        assert live["apiVersion"] == obj["apiVersion"] and live["metadata"]["uid"], what

        if obj["kind"] == "CustomResourceDefinition":
            crd = kube.wait_condition(CRD_API, "CustomResourceDefinition", obj["metadata"]["name"], "Established",
                                      timeout=60)
            assert kube.condition(crd, "NamesAccepted")["status"] == "True"
            assert [v["name"] for v in crd["spec"]["versions"]] == [v["name"] for v in obj["spec"]["versions"]]
            probe_custom_resource(kube, obj, namespace, suffix, created)


def test_converted_crd_validates_and_prunes_like_the_v1beta1_original(kube, namespace, created):
    """The Notebook CRD kept unknown fields (preserveUnknownFields defaulted) and validated spec.replicas >= 0;
    the Experiment CRD opted into pruning: both behaviours survive the conversion."""
    suffix = uuid.uuid4().hex[:6]
    crds = {}
    for name in ("crd-v1beta1", "crd-v1beta1-versions"):
        (upgraded,) = upgrade_objects(load(FIXTURES / "upgrade" / f"{name}.before.yaml"),
                                      served_for_release("1.36")).objects
        crd = isolate(upgraded, suffix, namespace, namespaced=False)
        kube.apply(crd)
        created.add(crd)
        kube.wait_condition(CRD_API, "CustomResourceDefinition", crd["metadata"]["name"], "Established")
        crds[name] = crd

    notebooks = crds["crd-v1beta1"]["spec"]["group"]
    notebook = {"apiVersion": f"{notebooks}/v1beta1", "kind": "Notebook",
                "metadata": {"name": "nb", "namespace": namespace},
                "spec": {"replicas": 1, "extra": {"kept": True}, "template": {"spec": {"containers": []}}}}
    live = kube.apply(notebook)
    created.add(notebook)
    assert live["spec"] == notebook["spec"]
    with pytest.raises(ApiException) as refused:
        kube.apply({**notebook, "spec": {"replicas": -1}})
    assert refused.value.status == 422 and "replicas" in refused.value.body

    experiments = crds["crd-v1beta1-versions"]["spec"]["group"]
    experiment = {"apiVersion": f"{experiments}/v1beta1", "kind": "Experiment", "metadata": {"name": "exp"},
                  "spec": {"maxTrials": "12", "tags": ["a", "a"], "anything": {"free": ["form"]},
                           "parameters": {"max": 3, "undeclared": "x"}, "unknown": 1,
                           "objective": {"goal": 0.5}}}
    live = create(kube, experiment)
    created.add(experiment)
    assert live["spec"] == {"maxTrials": "12", "tags": ["a", "a"], "anything": {"free": ["form"]},
                            "parameters": {"max": 3}, "objective": {"goal": 0.5}}
    with pytest.raises(ApiException) as refused:
        create(kube, {**experiment, "metadata": {"name": "exp-2"}, "spec": {"objective": {"goal": -1}}})
    assert refused.value.status == 422 and "goal" in refused.value.body


# --------------------------------------------------------------------------------------------------------------------
# A kfctl v1.0-style stack deployed through a KfDef


def copy_legacy_stack(tmp_path: Path) -> tuple[Path, str]:
    """The legacy-stack repo copied with its placeholder replaced by a unique suffix."""
    suffix = uuid.uuid4().hex[:6]
    repo = tmp_path / f"legacy-stack-{suffix}"
    shutil.copytree(LEGACY_STACK, repo)
    for path in repo.rglob("*"):
        if path.is_file():
            path.write_text(path.read_text().replace(LEGACY_TOKEN, suffix))
    return repo, suffix


def legacy_kfdef(repo: Path, name: str, namespace: str, annotations: dict | None = None) -> dict:
    kfdef = yaml.safe_load((repo / "kfdef.yaml").read_text())
    kfdef["metadata"] = {"name": name, "namespace": namespace, **({"annotations": annotations} if annotations else {})}
    for source in kfdef["spec"]["repos"]:
        source["uri"] = str(repo.resolve())
    return kfdef


def delete_kfdef(kube: Kube, name: str, namespace: str) -> None:
    kube.delete(KFDEF_API, "KfDef", name, namespace)
    kube.wait_gone(KFDEF_API, "KfDef", name, namespace, timeout=120)


def legacy_objects(suffix: str, namespace: str) -> list[tuple[str, str, str, str | None]]:
    return [
        (CRD_API, "CustomResourceDefinition", f"gadgets.{suffix}.legacy.example.org", None),
        ("rbac.authorization.k8s.io/v1", "ClusterRole", f"gadgets-controller-{suffix}", None),
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", f"gadgets-controller-{suffix}", None),
        ("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration", f"gadgets-validation-{suffix}", None),
        ("apps/v1", "Deployment", "gadgets-controller", namespace),
        ("networking.k8s.io/v1", "Ingress", "gadgets", namespace),
        ("v1", "Service", "gadgets-controller", namespace),
        ("v1", "ServiceAccount", "gadgets-controller", namespace),
        ("v1", "ConfigMap", "gadgets-parameters", namespace),
    ]


def test_legacy_v1_0_stack_deploys_through_a_kfdef_and_becomes_ready(operator, kube, kfdef_namespace, tmp_path):
    repo, suffix = copy_legacy_stack(tmp_path)
    kube.apply(legacy_kfdef(repo, "legacy", kfdef_namespace))
    try:
        kfdef = wait_ready(kube, "legacy", kfdef_namespace, timeout=180)
        status = kfdef["status"]
        assert status["upgrades"]["count"] > 0
        assert {k: v for k, v in status["upgrades"].items() if k != "notes"} == {"count": 6, "kinds": [
            "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition", "Deployment", "Ingress",
            "ValidatingWebhookConfiguration"]}
        # What a conversion had to add or drop is said in status, per object.
        assert any(note.startswith("CustomResourceDefinition gadgets.") for note in status["upgrades"]["notes"])
        assert status["summary"]["upgraded"] == status["upgrades"]["count"]
        assert status["summary"]["total"] == status["summary"]["ready"] == 9
        assert status["failures"] == []
        assert {held.entry.version for held in read_inventory(status)} == {"v1"}  # served versions recorded

        for api_version, kind, name, namespace in legacy_objects(suffix, kfdef_namespace):
            assert kube.exists(api_version, kind, name, namespace), f"{kind} {name} not applied as {api_version}"
        deployment = kube.get("apps/v1", "Deployment", "gadgets-controller", kfdef_namespace)
        assert deployment["spec"]["selector"] == {"matchLabels": {"app": "gadgets-controller"}}
        assert kube.condition(deployment, "Available")["status"] == "True"
        crd = kube.get(CRD_API, "CustomResourceDefinition", f"gadgets.{suffix}.legacy.example.org")
        assert kube.condition(crd, "Established")["status"] == "True"
        assert [c["jsonPath"] for c in crd["spec"]["versions"][0]["additionalPrinterColumns"]] == [
            ".spec.size", ".metadata.creationTimestamp"]
        webhook = kube.get("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration",
                           f"gadgets-validation-{suffix}")
        assert [w["failurePolicy"] for w in webhook["webhooks"]] == ["Ignore"]
        ingress = kube.get("networking.k8s.io/v1", "Ingress", "gadgets", kfdef_namespace)
        (path,) = ingress["spec"]["rules"][0]["http"]["paths"]
        assert path["backend"]["service"] == {"name": "gadgets-controller", "port": {"number": 80}}

        def upgrade_event():
            events = kube.core.list_namespaced_event(kfdef_namespace).items
            return [e for e in events if e.reason == "ApiVersionsUpgraded" and e.involved_object.name == "legacy"]
        (event, *_) = wait_for(upgrade_event, timeout=30, what="ApiVersionsUpgraded event")
        assert event.message.startswith("upgraded 6 objects (ClusterRole 1,")
    finally:
        delete_kfdef(kube, "legacy", kfdef_namespace)
    for api_version, kind, name, namespace in legacy_objects(suffix, kfdef_namespace):
        if namespace is None:
            assert not kube.exists(api_version, kind, name), f"teardown left {kind} {name}"


def test_legacy_stack_with_upgrades_off_is_degraded_listing_the_unserved_objects(operator, kube, kfdef_namespace,
                                                                                   tmp_path):
    repo, suffix = copy_legacy_stack(tmp_path)
    kube.apply(legacy_kfdef(repo, "legacy-off", kfdef_namespace, annotations={POLICY_ANNOTATION: "off"}))
    try:
        kfdef = wait_condition_reason(kube, "legacy-off", kfdef_namespace, "Degraded", "True", "UnservedApiVersions")
        message = kube.condition(kfdef, "Degraded")["message"]
        assert message.startswith("6 objects use API versions the server does not serve")
        for described in (
                f"CustomResourceDefinition gadgets.{suffix}.legacy.example.org (apiextensions.k8s.io/v1beta1)",
                f"ClusterRole gadgets-controller-{suffix} (rbac.authorization.k8s.io/v1beta1)",
                f"ClusterRoleBinding gadgets-controller-{suffix} (rbac.authorization.k8s.io/v1beta1)",
                f"Deployment {kfdef_namespace}/gadgets-controller (extensions/v1beta1)",
                f"Ingress {kfdef_namespace}/gadgets (extensions/v1beta1)",
                f"ValidatingWebhookConfiguration gadgets-validation-{suffix} (admissionregistration.k8s.io/v1beta1)"):
            assert described in message
        assert kube.condition(kfdef, "Ready")["status"] == "False"
        assert not kube.exists(CRD_API, "CustomResourceDefinition", f"gadgets.{suffix}.legacy.example.org"), (
            "nothing may be applied under policy off")
    finally:
        delete_kfdef(kube, "legacy-off", kfdef_namespace)
