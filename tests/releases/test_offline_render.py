"""Real Kubeflow releases rendered offline: the operator's renderer against plain kustomize, and the upgrade for
Kubernetes 1.36 against what apiextensions/admissionregistration v1 refuse.

kfctl's stacks mode (every v1.2.0 KfDef file) must build exactly what kustomize builds of kfctl's wrappers: on this
tree kustomize v3's and v5's meanings of ``namespace:`` agree (the Namespace objects whose names v5 would change
are named ``$(namespace)``, a var that resolves to the same name), so the renderer's v3 rewrites change nothing and
there is no intended difference. The modern ``example/`` entry point must build exactly as ``kustomize build
example`` does, in plain mode and in stacks mode (a tree written for v5 gets no v3 rewrite).
"""

from __future__ import annotations

import collections
import json
from urllib.parse import urlsplit

import pytest

from kfdef_operator.upgrade.convert import served_for_release, upgrade_objects
from kfdef_operator.upgrade.crd import API_APPROVAL_ANNOTATION, is_protected_group
from kfdef_operator.upgrade.structural import is_structural
from tests.releases.conftest import KFCTL_V1_2_0, Rendered

pytestmark = pytest.mark.kustomize  # renders through the render helper, compared with the kustomize CLI


SERVED_1_36 = served_for_release("1.36")
LARGE_CRD_BYTES = 256 * 1024


def identity(obj: dict) -> tuple:
    meta = obj.get("metadata") or {}
    return obj.get("apiVersion"), obj.get("kind"), meta.get("namespace"), meta.get("name")


def differences(rendered: Rendered) -> dict[str, dict[str, list]]:
    """Per application: objects only the operator renders, only plain kustomize builds, and whether the order
    differs. Empty when they are identical."""
    found = {}
    for app in rendered.applications:
        plain = rendered.plain[app.name]
        only_operator = [identity(o) for o in app.objects if o not in plain]
        only_plain = [identity(o) for o in plain if o not in app.objects]
        if only_operator or only_plain or app.objects != plain:
            found[app.name] = {"only operator": only_operator, "only kustomize": only_plain}
    return found


@pytest.mark.parametrize("name", KFCTL_V1_2_0)
def test_kfctl_v1_2_0_stacks_render_as_kustomize_builds_kfctls_wrappers(v1_2_0, name):
    rendered = v1_2_0[name]
    assert {app.mode for app in rendered.applications} == {"stacks"}
    assert differences(rendered) == {}


def test_v1_11_0_example_renders_as_kustomize_build_example(v1_11_0):
    rendered = v1_11_0["plain"]
    [app] = rendered.applications
    assert app.mode == "plain"
    assert differences(rendered) == {}


def test_v1_11_0_example_also_builds_in_kfctls_stacks_mode(v1_11_0):
    # Its replacements read namespaces that a v3 rewrite would have moved after them.
    rendered = v1_11_0["stacks"]
    assert [app.mode for app in rendered.applications] == ["stacks"]
    assert differences(rendered) == {}
    # The same objects as plain mode; only the order differs: example/'s sortOptions order its own build, and
    # kfctl's wrapper around it sorts with kustomize's default.
    by_identity = {identity(o): o for o in v1_11_0["plain"].objects}
    assert {identity(o): o for o in rendered.objects} == by_identity and len(rendered.objects) == len(by_identity)


def counts(objects: list[dict]) -> dict[str, int]:
    crds = [o for o in objects if o["kind"] == "CustomResourceDefinition"]
    return {"objects": len(objects), "distinct": len({identity(o) for o in objects}), "CRDs": len(crds),
            "v1beta1 CRDs": sum(o["apiVersion"].endswith("/v1beta1") for o in crds),
            "CRDs over 256 KiB": sum(len(json.dumps(o)) > LARGE_CRD_BYTES for o in crds),
            "webhook configurations": sum(o["kind"].endswith("WebhookConfiguration") for o in objects)}


def test_the_releases_have_the_documented_size(v1_2_0, v1_11_0):
    assert counts(v1_2_0["kfctl_k8s_istio.v1.2.0.yaml"].objects) == {
        "objects": 565, "distinct": 560, "CRDs": 65, "v1beta1 CRDs": 65, "CRDs over 256 KiB": 0,
        "webhook configurations": 13}
    assert counts(v1_11_0["plain"].objects) == {
        "objects": 653, "distinct": 653, "CRDs": 70, "v1beta1 CRDs": 0, "CRDs over 256 KiB": 6,
        "webhook configurations": 27}


# --- what v1 refuses ---------------------------------------------------------------------------------------------

def _approval_is_valid(value: str | None) -> bool:
    """The server's rule: a URL with scheme and host (approved), or a text starting with "unapproved"."""
    if not value:
        return False
    url = urlsplit(value)
    return value.startswith("unapproved") or bool(url.scheme and url.netloc)


def _metadata_blocks(obj: dict) -> list[dict]:
    spec = obj.get("spec") or {}
    job = spec.get("jobTemplate") or {}
    candidates = [obj.get("metadata"), (spec.get("template") or {}).get("metadata"), job.get("metadata"),
                  ((job.get("spec") or {}).get("template") or {}).get("metadata")]
    return [block for block in candidates if isinstance(block, dict)]


def v1_rejections(objects: list[dict]) -> list[str]:
    """What a Kubernetes 1.36 API server would refuse in these (upgraded) objects, as found here."""
    problems = []
    for obj in objects:
        what = "{} {}".format(obj["kind"], obj["metadata"]["name"])
        if any("initializers" in block for block in _metadata_blocks(obj)):
            problems.append(f"{what}: initializers")
        if obj["kind"] == "CustomResourceDefinition":
            spec = obj["spec"]
            annotation = (obj["metadata"].get("annotations") or {}).get(API_APPROVAL_ANNOTATION)
            if is_protected_group(spec["group"]) and not _approval_is_valid(annotation):
                problems.append(f"{what}: protected group {spec['group']} without a valid approval annotation")
            if sum(bool(version.get("storage")) for version in spec["versions"]) != 1:
                problems.append(f"{what}: not exactly one storage version")
            problems += [f"{what}: {violation}" for version in spec["versions"]
                         for violation in is_structural(version["schema"]["openAPIV3Schema"])]
        if obj["kind"].endswith("WebhookConfiguration"):
            names = collections.Counter(webhook["name"] for webhook in obj.get("webhooks") or [])
            problems += [f"{what}: webhook name {name} repeated" for name, count in names.items() if count > 1]
            problems += [f"{what}: webhook {webhook['name']} sideEffects {webhook.get('sideEffects')}"
                         for webhook in obj.get("webhooks") or []
                         if webhook.get("sideEffects") not in ("None", "NoneOnDryRun")
                         or not webhook.get("admissionReviewVersions")]
    return problems


@pytest.mark.parametrize("name", KFCTL_V1_2_0)
def test_kfctl_v1_2_0_upgraded_for_1_36_holds_nothing_v1_refuses(v1_2_0, name):
    result = upgrade_objects(v1_2_0[name].objects, SERVED_1_36)
    assert result.unserved == []
    defined = {(f"{o['spec']['group']}/{v['name']}", o["spec"]["names"]["kind"])
               for o in result.objects if o["kind"] == "CustomResourceDefinition" for v in o["spec"]["versions"]}
    assert [identity(o) for o in result.objects
            if not (SERVED_1_36(o["apiVersion"], o["kind"]) or (o["apiVersion"], o["kind"]) in defined)] == []
    assert v1_rejections(result.objects) == []


def test_kfctl_k8s_istio_upgrade_counts_and_notes(v1_2_0):
    result = upgrade_objects(v1_2_0["kfctl_k8s_istio.v1.2.0.yaml"].objects, SERVED_1_36)
    assert result.summary() == (
        "upgraded 132 objects (APIService 1, ClusterRole 16, ClusterRoleBinding 17, CustomResourceDefinition 65, "
        "HorizontalPodAutoscaler 6, MutatingWebhookConfiguration 7, PodDisruptionBudget 7, Role 3, RoleBinding 4, "
        "ValidatingWebhookConfiguration 6)")
    annotated = [item.name for item in result.upgraded if any(API_APPROVAL_ANNOTATION in note for note in item.notes)]
    assert collections.Counter(name.split(".", 1)[1] for name in annotated) == {
        "certmanager.k8s.io": 5, "metacontroller.k8s.io": 3, "sparkoperator.k8s.io": 2, "app.k8s.io": 1}
    # Nothing of this release needed the other repairs (no initializers, no repeated webhook names).
    assert [note for item in result.upgraded for note in item.notes
            if "initializers" in note or "repeated name" in note] == []


def test_v1_11_0_needs_no_upgrade_for_1_36(v1_11_0):
    result = upgrade_objects(v1_11_0["plain"].objects, SERVED_1_36)
    assert result.upgraded == [] and result.unserved == []
    assert v1_rejections(result.objects) == []
