"""The build boundary holds where kustomize reads (issue 23, item 1): every kustomization field that names a file or
URL, written the ways a second parser reads differently from kustomize's (a key in another case, a key repeated in
another case, a value tagged ``!!binary``), is refused with the offending file named, in plain, legacy and stacks
mode, and nothing outside the tree reaches an object or an error message. The same attacks go straight to the
render helper (no Python pre-check) and through ``kfdef-operator build``; ``test_build_trust.py`` sends them to the
running operator.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from kfdef_operator.api.kfdef import KfDef, parse_kfdef
from kfdef_operator.build import kustomize
from kfdef_operator.build.kustomize import KustomizeError
from kfdef_operator.build.render import RenderError, render
from kfdef_operator.source.resolve import ResolvedSource
from tests.reliability.support import TarballServer

pytestmark = pytest.mark.kustomize

SECRET = "operator-secret-7f3a"
MODES = ("plain", "legacy", "stacks")
FORMS = ("case", "duplicate", "binary")


@dataclass(frozen=True)
class Outside:
    """Files of the operator's that a build must never read, each holding :data:`SECRET` in the shape its field
    expects, and an internal URL that must never be fetched."""

    root: Path
    url: str

    def path(self, name: str) -> str:
        return str(self.root / name)


def _outside(root: Path, url: str) -> Outside:
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "stolen"}, "data": {"s": SECRET}}
    files = {
        "cm.yaml": config_map,
        "base/kustomization.yaml": {"resources": ["cm.yaml"]},
        "base/cm.yaml": config_map,
        "component/kustomization.yaml": {"apiVersion": "kustomize.config.k8s.io/v1alpha1", "kind": "Component",
                                         "resources": ["cm.yaml"]},
        "component/cm.yaml": config_map,
        "secret.txt": SECRET,
        "secret.env": f"s={SECRET}\n",
        "patch.yaml": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}, "data": {"s": SECRET}},
        "json6902.yaml": [{"op": "add", "path": "/data/s", "value": SECRET}],
        "config.yaml": {"commonLabels": [{"path": f"metadata/{SECRET}", "create": True}]},
        "crd.json": {"definitions": {SECRET: {}}},
        "openapi.json": {"definitions": {SECRET: {}}},
        "replacements.yaml": [{"source": {"kind": "ConfigMap", "name": SECRET}, "targets": []}],
        "generator.yaml": {"apiVersion": "builtin", "kind": "ConfigMapGenerator", "metadata": {"name": "stolen"},
                           "literals": [f"s={SECRET}"]},
        "transformer.yaml": {"apiVersion": "builtin", "kind": "LabelTransformer", "metadata": {"name": "t"},
                             "labels": {"s": SECRET}, "fieldSpecs": [{"path": "metadata/labels", "create": True}]},
    }
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content if isinstance(content, str) else yaml.safe_dump(content))
    return Outside(root, url)


# Each field that names a file or URL: (the key as kustomize spells it, the YAML under it with {ref} where the
# reference goes, the reference). Plugin fields (generators, transformers, validators) name plugin configurations.
ATTACKS: dict[str, tuple[str, str, Callable[[Outside], str]]] = {
    "resources": ("resources", "- {ref}\n", lambda o: o.path("cm.yaml")),
    "resources (URL)": ("resources", "- {ref}\n", lambda o: o.url + "/cm.yaml"),
    "bases": ("bases", "- {ref}\n", lambda o: o.path("base")),
    "components": ("components", "- {ref}\n", lambda o: o.path("component")),
    "configMapGenerator.files": ("configMapGenerator", "- name: leak\n  files:\n  - {ref}\n",
                                 lambda o: "stolen=" + o.path("secret.txt")),
    "configMapGenerator.files (URL)": ("configMapGenerator", "- name: leak\n  files:\n  - {ref}\n",
                                       lambda o: "stolen=" + o.url + "/secret.txt"),
    "configMapGenerator.envs": ("configMapGenerator", "- name: leak\n  envs:\n  - {ref}\n",
                                lambda o: o.path("secret.env")),
    "configMapGenerator.env": ("configMapGenerator", "- name: leak\n  env: {ref}\n", lambda o: o.path("secret.env")),
    "secretGenerator.files": ("secretGenerator", "- name: leak\n  files:\n  - {ref}\n",
                              lambda o: "stolen=" + o.path("secret.txt")),
    "secretGenerator.envs": ("secretGenerator", "- name: leak\n  envs:\n  - {ref}\n", lambda o: o.path("secret.env")),
    "patches": ("patches", "- path: {ref}\n", lambda o: o.path("patch.yaml")),
    "patches (URL)": ("patches", "- path: {ref}\n", lambda o: o.url + "/patch.yaml"),
    "patchesJson6902": ("patchesJson6902", "- target: {{version: v1, kind: ConfigMap, name: cm}}\n  path: {ref}\n",
                        lambda o: o.path("json6902.yaml")),
    "patchesStrategicMerge": ("patchesStrategicMerge", "- {ref}\n", lambda o: o.path("patch.yaml")),
    "configurations": ("configurations", "- {ref}\n", lambda o: o.path("config.yaml")),
    "crds": ("crds", "- {ref}\n", lambda o: o.path("crd.json")),
    "openapi": ("openapi", "  path: {ref}\n", lambda o: o.path("openapi.json")),
    "replacements": ("replacements", "- path: {ref}\n", lambda o: o.path("replacements.yaml")),
    "helmCharts": ("helmCharts", "- name: chart\n  repo: {ref}\n  valuesFile: " + "{ref}\n",
                   lambda o: o.url + "/charts"),
    "generators": ("generators", "- {ref}\n", lambda o: o.path("generator.yaml")),
    "transformers": ("transformers", "- {ref}\n", lambda o: o.path("transformer.yaml")),
    "validators": ("validators", "- {ref}\n", lambda o: o.path("transformer.yaml")),
}
BENIGN = {"openapi": "{}"}  # the exact key's harmless value in the duplicate form (else an empty list)


def _other_case(key: str) -> str:
    """``key`` as Go's encoding/json still matches it to kustomize's field, and an exact-key lookup does not."""
    return key[0].upper() + key[1:] if key[0].islower() else key.lower()


def hostile_kustomization(field: str, form: str, outside: Outside) -> tuple[str, str]:
    """(kustomization text, the reference as the error must name it) for one field and form."""
    key, body, reference = ATTACKS[field]
    ref = reference(outside)
    if form == "binary":
        value = body.format(ref="!!binary " + base64.b64encode(ref.encode()).decode())
        return f"{key}:\n{value}", ref
    value = body.format(ref=json.dumps(ref))
    if form == "case":
        return f"{_other_case(key)}:\n{value}", ref
    return f"{key}: {BENIGN.get(key, '[]')}\n{_other_case(key)}:\n{value}", ref


def _kfdef_document(mode: str) -> dict:
    """A KfDef of the application ``app`` (package ``pkg``), with kfctl's ``kubeflow-apps`` in stacks mode."""
    apps = [{"name": "app", "kustomizeConfig": {"repoRef": {"name": "manifests", "path": "pkg"}}}]
    if mode == "stacks":
        apps.append({"name": "kubeflow-apps", "kustomizeConfig": {"repoRef": {"name": "manifests", "path": "common"}}})
    return {"apiVersion": "kfdef.apps.kubeflow.org/v1", "kind": "KfDef",
            "metadata": {"name": "kf", "namespace": "tenant"},
            "spec": {"repos": [{"name": "manifests", "uri": "/unused"}], "applications": apps}}


def _kfdef(mode: str) -> KfDef:
    return parse_kfdef(_kfdef_document(mode))


def write_repo(root: Path, mode: str, kustomization: str) -> Path:
    """A repository whose package ``pkg`` holds ``kustomization`` where the mode's build reads it; returns the
    directory of that file. Outside plain mode the kustomization also reads a file of the repository outside its
    own folder, as kfctl-era trees do, so that its build needs kustomize's permissive load restrictor (then only
    the boundary keeps the build inside the repository)."""
    package = root / "pkg" / ("base" if mode == "legacy" else "")
    package.mkdir(parents=True, exist_ok=True)
    if mode != "plain":
        # ../shared: a sibling folder of the kustomization's (inside the package, which is legacy mode's tree)
        names_configurations = "configurations" in kustomization.lower()
        kustomization = ("crds:\n- ../shared/crd.json\n" if names_configurations
                         else "configurations:\n- ../shared/config.yaml\n") + kustomization
    (package / "kustomization.yaml").write_text(kustomization)
    (package / "harmless.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm}\n")
    (root / "common").mkdir(exist_ok=True)
    (root / "common" / "kustomization.yaml").write_text("resources: []\n")
    shared = package.parent / "shared"
    shared.mkdir(exist_ok=True)
    (shared / "config.yaml").write_text("nameReference: []\n")
    (shared / "crd.json").write_text('{"definitions": {}}\n')
    return package


@pytest.fixture(scope="module")
def internal():
    """An "internal" HTTP service on 127.0.0.1 holding the secret, as a metadata server would."""
    server = TarballServer()
    for name in ("cm.yaml", "secret.txt", "patch.yaml", "charts"):
        server.serve(f"/{name}", SECRET.encode())
    yield server
    server.close()


@pytest.fixture
def outside(tmp_path, internal) -> Outside:
    for route in internal.routes.values():
        route.hits.clear()  # each test counts its own fetches
    return _outside(tmp_path / "operator-files", internal.url("").rstrip("/"))


def _assert_refused(message: str, field: str, reference: str, internal: TarballServer) -> None:
    assert SECRET not in message, message
    if field == "helmCharts":
        assert "helm" in message.lower(), message
    else:
        shown = reference.removeprefix("stolen=")
        named = shown in message or ("!!binary value" in message and "kustomization.yaml" in message)
        assert named, f"the message names neither {shown} nor the kustomization: {message}"
        assert ("is outside the tree the KfDef names" in message or "network access is refused" in message
                or "leads outside the repository" in message or "is remote; remote bases" in message
                or "cannot be absolute" in message or "!!binary value" in message), message
    assert not any(route.hits for route in internal.routes.values()), "an internal URL was fetched"


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("field", list(ATTACKS))
def test_render_refuses_every_hostile_form_of_every_field(field, mode, form, outside, internal, tmp_path):
    """Where kustomize's decoding takes the exactly spelled key over a repeated one in another case, the build
    reads the harmless value and succeeds; then nothing of the outside may be in its objects."""
    text, reference = hostile_kustomization(field, form, outside)
    root = tmp_path / "repo"
    write_repo(root, mode, text)
    sources = {"manifests": ResolvedSource("manifests", str(root), root, "r1")}
    try:
        rendered = render(_kfdef(mode), sources, tmp_path / "work")
    except RenderError as refused:
        assert str(tmp_path / "work") not in str(refused), "a temporary path reached the message"
        if form == "duplicate" and reference.removeprefix("stolen=") not in str(refused):
            # kustomize took the harmless value, and failed on it (e.g. "kustomization.yaml is empty")
            assert SECRET not in str(refused) and not any(route.hits for route in internal.routes.values())
            return
        _assert_refused(str(refused), field, reference, internal)
        return
    assert form == "duplicate", f"the {form} form of {field} was built: {rendered}"
    assert SECRET not in json.dumps([app.objects for app in rendered])
    assert not any(route.hits for route in internal.routes.values()), "an internal URL was fetched"


@pytest.mark.parametrize("form", ["exact", "case", "binary"])
@pytest.mark.parametrize("field", list(ATTACKS))
def test_the_helper_refuses_each_field_without_any_pre_check(field, form, outside, internal, tmp_path):
    """Straight to the render helper: the boundary does not depend on Python's walk."""
    if form == "exact":
        key, body, reference = ATTACKS[field]
        ref = reference(outside)
        text = f"{key}:\n{body.format(ref=json.dumps(ref))}"
    else:
        text, ref = hostile_kustomization(field, form, outside)
    root = tmp_path / "repo"
    package = write_repo(root, "plain", text)
    for restrictor in ("LoadRestrictionsRootOnly", "LoadRestrictionsNone"):
        with pytest.raises(KustomizeError) as refused:
            kustomize.build(package, roots={root: "manifests:"}, home=tmp_path / "home", load_restrictor=restrictor)
        _assert_refused(str(refused.value), field, ref, internal)


@pytest.mark.parametrize("mode", MODES)
def test_kfdef_operator_build_refuses_the_hostile_forms(mode, outside, internal, tmp_path):
    """``kfdef-operator build`` renders through the same helper: each form fails with the file named, exit 1."""
    for form in FORMS:
        text, reference = hostile_kustomization("configMapGenerator.files", form, outside)
        root = tmp_path / f"{mode}-{form}"
        write_repo(root, mode, text)
        document = _kfdef_document(mode)
        document["spec"]["repos"][0]["uri"] = str(root)
        kfdef_file = tmp_path / f"{mode}-{form}.yaml"
        kfdef_file.write_text(yaml.safe_dump(document))
        out = tmp_path / f"{mode}-{form}-out.yaml"
        done = subprocess.run([sys.executable, "-m", "kfdef_operator", "build", str(kfdef_file), "-o", str(out)],
                              capture_output=True, text=True, timeout=120)
        assert not out.exists() or SECRET not in out.read_text()
        if form == "duplicate" and done.returncode == 0:
            continue  # kustomize took the exactly spelled, harmless key
        assert done.returncode == 1, (form, done.returncode, done.stderr)
        _assert_refused(done.stderr, "configMapGenerator.files", reference, internal)
