"""What a tenant's manifests can make a build do (issue 12, items 2, 3 and 4), tried against the running operator.

A tenant controls the bytes of the repositories its KfDef names. These scenarios write hostile kustomizations as
such a tenant would and check that the operator lends nothing of its own: no file of the operator's (its kubeconfig,
``/etc/passwd``, a service-account token path) and no internal URL ends up in a ConfigMap, no file is written outside
the KfDef's own work directory, and a manifest built to crash or exhaust the render fails only its KfDef while the
operator process (same PID, bounded memory) keeps reconciling and healing the others.
"""

from __future__ import annotations

import base64
import os
import uuid
from pathlib import Path

import pytest
import yaml

from tests.cluster.conftest import wait_condition_reason
from tests.kube import wait_for
from tests.reliability.support import TarballServer, condition, delete_kfdefs, kfdef, wait_ready
from tests.stacks import Stack, write_package

pytestmark = pytest.mark.cluster

TOKEN_PATH = "/var/run/secrets/kubernetes.io/serviceaccount/token"
MAX_OPERATOR_PEAK_MIB = 400  # the operator's own peak RSS while hostile renders run (its renders run in children)


def _write(path: Path, data) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False))


def _package(root: Path, path: str, kustomization: dict | str, **files: str) -> None:
    """A package whose ``base/`` kustomization is ``kustomization`` (kfctl's v1.0 layout)."""
    base = root / path / "base"
    _write(base / "kustomization.yaml", kustomization)
    for name, text in files.items():
        _write(base / name, text)


def _kfdef(name: str, namespace: str, root: Path, path: str = "app", *, stacks: bool = False,
           overlays: tuple[str, ...] = ()) -> dict:
    apps = [{"name": "app", "kustomizeConfig": {"repoRef": {"name": "manifests", "path": path},
                                                "overlays": list(overlays)}}]
    if stacks:  # kfctl >= 1.1 stacks: every application a thin wrapper, the whole repository readable
        apps.append({"name": "kubeflow-apps", "kustomizeConfig": {"repoRef": {"name": "manifests",
                                                                              "path": "common"}}})
    return Stack(root, "", namespace, "", apps).kfdef(name, namespace)


def _settled(obj: dict | None) -> bool:
    """Ready or Degraded for the KfDef's current generation."""
    generation = (obj or {}).get("metadata", {}).get("generation")
    return any(condition(obj, kind).get("status") == "True" and condition(obj, kind).get("observedGeneration")
               == generation for kind in ("Ready", "Degraded"))


def _peak_rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        line = next(line for line in status if line.startswith("VmHWM:"))
    return int(line.split()[1]) / 1024


def _config_maps_holding(kube, namespace: str, needle: str) -> list[str]:
    return [item.metadata.name for item in kube.core.list_namespaced_config_map(namespace).items
            if any(needle in (value or "") for value in (item.data or {}).values())]


@pytest.fixture
def internal():
    """An "internal" HTTP service on 127.0.0.1 holding a secret, as a metadata server or an admin API would."""
    server = TarballServer()
    yield server
    server.close()


def test_generators_cannot_read_the_operators_files_or_fetch_internal_urls(operator, control_plane, kube,
                                                                            kfdef_namespace, tmp_path, internal,
                                                                            reliability):
    """configMapGenerator naming /etc/passwd, the operator's kubeconfig, a token path, an internal URL"""
    ns = kfdef_namespace
    marker = f"internal-secret-{uuid.uuid4().hex[:8]}"
    route = internal.serve("/latest/meta-data/credentials", marker.encode())
    kubeconfig = control_plane.kubeconfig
    attacks = {  # name -> (file source as the tenant writes it, text that would prove the leak)
        "passwd": ("/etc/passwd", "root:"),
        "kubeconfig": (str(kubeconfig), "client-key-data"),
        "token": (TOKEN_PATH, ""),
        "url": (internal.url("/latest/meta-data/credentials"), marker),
    }
    for mode in ("legacy", "stacks"):
        for name, (source, _) in attacks.items():
            root = tmp_path / f"{mode}-{name}"
            _package(root, "app", {"resources": ["cm.yaml"], "configMapGenerator": [
                {"name": f"leak-{name}", "files": [f"stolen={source}"]}]},
                **{"cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: innocent}\n"})
            _write(root / "common" / "kustomization.yaml", {"resources": []})
            kube.apply(_kfdef(f"{mode}-{name}", ns, root, "app/base" if mode == "stacks" else "app",
                              stacks=mode == "stacks"))
    messages = {}
    for mode in ("legacy", "stacks"):
        for name, (source, _) in attacks.items():
            obj = wait_condition_reason(kube, f"{mode}-{name}", ns, "Degraded", "True", "RenderFailed", timeout=90)
            message = condition(obj, "Degraded")["message"]
            expected = ("is remote; remote bases and URLs are refused" if name == "url"
                        else "leads outside the repository")
            assert f"configMapGenerator[0].files[0] '{source}' {expected}" in message, (mode, name, message)
            messages[name] = message
    for name, (_, proof) in attacks.items():
        if proof:
            assert not _config_maps_holding(kube, ns, proof), f"the {name} content reached a ConfigMap"
    assert not kube.core.list_namespaced_config_map(ns, label_selector="kfdef.apps.kubeflow.org/instance").items
    assert not route.hits, "kustomize fetched the internal URL"
    log = operator.log_tail(3000)
    assert marker not in log and "client-key-data" not in log
    started = operator.log_path.read_text()
    assert "rendering with kustomize v5.8.2 through kfdef-render (" in started  # said at start
    assert "remote bases refused" in started
    reliability.figure("attacks", "4 file sources (passwd, kubeconfig, token path, internal URL) x legacy and stacks")
    reliability.figure("refused with", messages["passwd"].split("refused to build: ")[-1].split(". A build")[0])
    delete_kfdefs(kube, ns)



def test_kustomize_reads_no_operator_file_however_the_kustomization_spells_it(operator, control_plane, kube,
                                                                              kfdef_namespace, tmp_path, reliability):
    """The operator's kubeconfig and /etc/passwd named by a generator spelled in another case, under a repeated key,
    or as a !!binary value, in plain, legacy and stacks mode"""
    ns = kfdef_namespace
    kubeconfig = str(control_plane.kubeconfig)
    binary = base64.b64encode(b"stolen=/etc/passwd").decode()
    forms = {  # name -> (kustomization text, the path the message must name, text that would prove the leak)
        "case": (f"ConfigMapGenerator:\n- name: leak\n  files: ['stolen={kubeconfig}']\n", kubeconfig,
                 "client-key-data"),
        "repeated": (f"configMapGenerator:\n- name: leak\n  literals: [a=b]\nConfigMapGenerator:\n- name: leak2\n"
                     f"  files: ['stolen={kubeconfig}']\n", kubeconfig, "client-key-data"),
        "binary": (f"configMapGenerator:\n- name: leak\n  files:\n  - !!binary {binary}\n",
                   "configMapGenerator[0].files[0] is a !!binary value", "root:"),
    }
    names = []
    for mode in ("plain", "legacy", "stacks"):
        for form, (text, _, _) in forms.items():
            root = tmp_path / f"{mode}-{form}"
            package = root / "app" / ("base" if mode != "plain" else "")
            _write(package / "kustomization.yaml", text)
            _write(root / "common" / "kustomization.yaml", {"resources": []})
            path = "app/base" if mode == "stacks" else "app"
            kube.apply(_kfdef(f"{mode}-{form}", ns, root, path, stacks=mode == "stacks"))
            names.append((mode, form))
    for mode, form in names:
        obj = wait_condition_reason(kube, f"{mode}-{form}", ns, "Degraded", "True", "RenderFailed", timeout=120)
        message = condition(obj, "Degraded")["message"]
        named, proof = forms[form][1], forms[form][2]
        assert named in message and "kustomization.yaml" in message or "outside the tree the KfDef names" in message, \
            (mode, form, message)
        assert named in message, (mode, form, message)
        assert proof not in message
    for proof in ("client-key-data", "root:"):
        assert not _config_maps_holding(kube, ns, proof), f"{proof!r} reached a ConfigMap"
    assert "client-key-data" not in operator.log_tail(3000)
    reliability.figure("attacks", "3 spellings (case, repeated key, !!binary) x plain, legacy and stacks")
    delete_kfdefs(kube, ns)

def test_a_patch_target_name_cannot_write_outside_the_kfdefs_work_directory(operator, kube, kfdef_namespace,
                                                                           tmp_path, reliability):
    """A json6902 patch whose target name climbs with ../ into another KfDef's repository"""
    ns = kfdef_namespace
    victim_root = tmp_path / "victim"
    write_package(victim_root, "app", [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "victim"},
                                        "data": {"owner": "victim"}}])
    victim_file = victim_root / "app" / "base" / "00-configmap.yaml"
    before = victim_file.read_bytes()
    # The attacker's aggregated patch file <name>-<Kind>.yaml lands on the victim's resource file, kfctl-style
    # appended: a second document the victim would then render and apply as its own.
    app_dir = operator.work_dir / "cache" / "render" / ns / "attacker" / "kustomize" / "app"
    climb = os.path.relpath(victim_file.parent / "00", app_dir)
    injected = "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: injected}\ndata: {owner: attacker}\n"
    attacker_root = tmp_path / "attacker"
    _package(attacker_root, "app", {"resources": ["cm.yaml"]},
             **{"cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: attacker}\n"})
    _write(attacker_root / "app" / "overlays" / "x" / "kustomization.yaml", {
        "bases": ["../../base"],
        "patchesJson6902": [{"target": {"version": "v1", "kind": "configmap", "name": climb}, "path": "inject.yaml"}]})
    _write(attacker_root / "app" / "overlays" / "x" / "inject.yaml", injected)
    kube.apply(_kfdef("attacker", ns, attacker_root, overlays=("x",)))
    wait_for(lambda: _settled(kfdef(kube, "attacker", ns)), timeout=90, what="the attacker's KfDef rendered")
    assert victim_file.read_bytes() == before, "the attacker's render wrote into the victim's repository"
    kube.apply(_kfdef("victim", ns, victim_root))
    wait_ready(kube, "victim", ns)
    assert not kube.exists("v1", "ConfigMap", "injected", ns), "the victim applied the attacker's object"
    assert kube.get("v1", "ConfigMap", "victim", ns)["data"] == {"owner": "victim"}
    reliability.figure("target name", climb.replace(str(tmp_path), "<tmp>"))
    reliability.figure("files written outside", 0)
    delete_kfdefs(kube, ns)


def test_hostile_manifests_fail_only_their_kfdef(operator, kube, kfdef_namespace, new_stack, tmp_path, reliability):
    """A nested-bracket bomb and a memory bomb next to a healthy KfDef"""
    ns = kfdef_namespace
    pid = operator.popen.pid
    healthy = new_stack(namespace=ns, with_webhook=False)
    kube.apply(healthy.kfdef("healthy", ns))
    wait_ready(kube, "healthy", ns)

    brackets = tmp_path / "brackets"
    _package(brackets, "app", "resources: " + "[" * 60_000 + "]" * 60_000 + "\n")
    memory = tmp_path / "memory"  # one 1 MiB file put into a ConfigMap 600 times by kustomize
    _package(memory, "app", {"configMapGenerator": [{"name": "bomb", "files": [f"k{i}=blob" for i in range(600)]}]},
             blob="x" * 1024 ** 2)
    kube.apply(_kfdef("brackets", ns, brackets))
    kube.apply(_kfdef("memory", ns, memory))
    for name, expected in (("brackets", "nest"), ("memory", "memory limit per process (KFDEF_RENDER_MEMORY)")):
        obj = wait_condition_reason(kube, name, ns, "Degraded", "True", "RenderFailed", timeout=180)
        assert expected in condition(obj, "Degraded")["message"], condition(obj, "Degraded")

    # The operator is the same process, and it still heals and reconciles the healthy KfDef.
    assert operator.popen.poll() is None and operator.popen.pid == pid
    kube.delete("v1", "ConfigMap", "app-parameters", healthy.namespace)
    wait_for(lambda: kube.exists("v1", "ConfigMap", "app-parameters", healthy.namespace), timeout=60,
             what="the deleted ConfigMap healed")
    kube.apply(healthy.kfdef("healthy", ns, applications=healthy.applications[:2]))  # a new generation
    wait_for(lambda: (condition(kfdef(kube, "healthy", ns), "Ready").get("observedGeneration") == 2
                      and condition(kfdef(kube, "healthy", ns), "Ready").get("status") == "True"),
             timeout=120, what="the healthy KfDef Ready for its new generation")
    peak = _peak_rss_mib(pid)
    assert peak < MAX_OPERATOR_PEAK_MIB, f"the operator's own memory peaked at {peak:.0f} MiB"
    reliability.figure("operator PID", "unchanged")
    reliability.figure("operator peak RSS MiB", round(peak))
    reliability.figure("memory bomb", "RenderFailed: exceeded the memory limit per process")
    delete_kfdefs(kube, ns)
