"""Remote bases switched on (``--no-remote-bases=false``) lend no tenant the operator's position (issue 39, item 2).

Before: a kustomization naming ``file://<work-dir>/sources/git/<mirror>//pkg?ref=<commit>`` built another tenant's
private repository out of the operator's git mirror, and a ``configMapGenerator`` naming a loopback URL or the
operator's own ``/metrics`` put them into the tenant's ConfigMap; the KfDefs said Ready. Now every connection of a
build (kustomize's and git's) goes through a proxy of that build applying the source fetches' address policy, git
clones over http(s) only, ``file://`` and ssh references are refused with the field named, and a build's clones go to
a directory of its own. The first tests run the render and the helper directly; the last one runs two tenants against
the multi-tenant install.
"""

from __future__ import annotations

import ipaddress
import json
import subprocess
from pathlib import Path

import pytest
import yaml

from kfdef_operator.api.kfdef import parse_kfdef
from kfdef_operator.build import kustomize
from kfdef_operator.build.egress import EgressProxy, RemoteBases
from kfdef_operator.build.render import RenderError, render
from kfdef_operator.source.network import NetworkPolicy
from kfdef_operator.source.resolve import ResolvedSource
from tests.cluster.conftest import KFDEF_API, wait_condition_reason
from tests.kube import Kube, wait_for
from tests.reliability.support import TarballServer, condition, wait_ready
from tests.reliability.test_tenancy import (  # noqa: F401  fixtures: the multi-tenant install, tenant-a
    RBAC,
    TENANT,
    admin,
    delete_kfdefs,
    multi_tenant,
    plane,
    start_operator,
    tenant,
)

MARKER = "private-to-tenant-a-93f1"
LOOPBACK = NetworkPolicy(allowed=(ipaddress.ip_network("127.0.0.1/32"),))


def git(*args: str | Path) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.org", *map(str, args)],
                          capture_output=True, text=True, check=True).stdout.strip()


def private_repository(path: Path) -> str:
    """A git repository holding ``pkg/``, a kustomization of one ConfigMap with :data:`MARKER`; its commit."""
    (path / "pkg").mkdir(parents=True)
    (path / "pkg" / "kustomization.yaml").write_text("resources: [cm.yaml]\n")
    (path / "pkg" / "cm.yaml").write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap",
                                                          "metadata": {"name": "private"}, "data": {"m": MARKER}}))
    git("init", "-q", path)
    git("-C", path, "add", ".")
    git("-C", path, "commit", "-q", "-m", "private")
    return git("-C", path, "rev-parse", "HEAD")


def tenant_repository(root: Path, kustomization: dict) -> dict:
    """A local repository whose ``app`` is a plain entry point with ``kustomization``; the KfDef's sources."""
    (root / "app").mkdir(parents=True)
    (root / "app" / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    return {"manifests": ResolvedSource("manifests", str(root), root, "r1")}


KFDEF = parse_kfdef({"metadata": {"name": "kf", "namespace": "tenant-b"}, "spec": {
    "repos": [{"name": "manifests", "uri": "/unused"}],
    "applications": [{"name": "app", "kustomizeConfig": {"repoRef": {"name": "manifests", "path": "app"}}}]}})


@pytest.fixture
def internal():
    """An "internal" HTTP service on 127.0.0.1, as the operator's own ports or a metadata server would be."""
    with TarballServer() as server:
        server.serve("/secret", b"internal-secret-71c2")
        yield server


@pytest.mark.kustomize
def test_a_file_url_naming_a_repository_on_the_operators_disk_is_refused(tmp_path, reliability):
    """resources: [file://<another tenant's repository>//pkg?ref=<commit>], by the walk and by the helper's git"""
    commit = private_repository(tmp_path / "mirror")
    reference = f"file://{tmp_path / 'mirror'}//pkg?ref={commit}"
    sources = tenant_repository(tmp_path / "repo", {"resources": [reference]})
    with pytest.raises(RenderError) as refused:
        render(KFDEF, sources, tmp_path / "work", remote_bases=RemoteBases(LOOPBACK))
    assert f"resources[0] '{reference}' names a repository on the operator's own disk (file://)" in str(refused.value)
    with EgressProxy(RemoteBases(LOOPBACK)) as proxy, pytest.raises(kustomize.KustomizeError) as failed:
        kustomize.build(tmp_path / "repo" / "app", roots={tmp_path / "repo": "manifests:"}, home=tmp_path / "home",
                        remote_proxy=proxy.url)  # no walk: git itself refuses the file transport
    assert "transport 'file' not allowed" in str(failed.value) and MARKER not in str(failed.value)
    reliability.figure("refused by", "the walk (field named) and git (GIT_ALLOW_PROTOCOL=https:http)")


@pytest.mark.kustomize
def test_remote_urls_follow_the_address_policy_of_source_fetches(tmp_path, internal, reliability):
    """configMapGenerator naming a loopback URL: refused unless the operator allows that network for sources"""
    sources = tenant_repository(tmp_path / "repo", {"configMapGenerator": [
        {"name": "leak", "files": [f"stolen={internal.url('/secret')}"]}]})
    with pytest.raises(RenderError) as refused:
        render(KFDEF, sources, tmp_path / "work", remote_bases=RemoteBases(allow_insecure_http=True))
    assert ("refused to fetch a remote base or URL: 127.0.0.1 is an internal address (loopback); sources are "
            "fetched from public addresses only") in str(refused.value)
    assert not internal.routes["/secret"].hits
    with pytest.raises(RenderError, match="plain http to 127.0.0.1 is refused"):
        render(KFDEF, sources, tmp_path / "work", remote_bases=RemoteBases(LOOPBACK))
    [app] = render(KFDEF, sources, tmp_path / "work", remote_bases=RemoteBases(LOOPBACK, allow_insecure_http=True))
    assert "internal-secret-71c2" in json.dumps(app.objects)  # the network the operator allows is fetched from
    reliability.figure("refused", "loopback by address; plain http without KFDEF_ALLOW_INSECURE_HTTP")


@pytest.mark.kustomize
def test_a_build_reads_and_writes_only_its_own_clone_directory(tmp_path):
    """With remote bases allowed the helper's temporary directory is one of its own below the render's home: what
    another build left in that home (its clones) is outside this build."""
    home = tmp_path / "home"
    (home / "kustomize-123").mkdir(parents=True)
    (home / "kustomize-123" / "secret.txt").write_text(MARKER)
    tenant_repository(tmp_path / "repo", {"configMapGenerator": [
        {"name": "leak", "files": [f"stolen={home / 'kustomize-123' / 'secret.txt'}"]}]})
    with EgressProxy(RemoteBases()) as proxy, pytest.raises(kustomize.KustomizeError) as refused:
        kustomize.build(tmp_path / "repo" / "app", roots={tmp_path / "repo": "manifests:"}, home=home,
                        load_restrictor="LoadRestrictionsNone", remote_proxy=proxy.url)
    assert "is outside the tree the KfDef names" in str(refused.value) and MARKER not in str(refused.value)
    assert sorted(path.name for path in home.iterdir()) == ["kustomize-123"]  # its own directory is gone


OTHER_TENANT = "tenant-b"


@pytest.fixture
def tenant_b(admin: Kube):
    """Namespace tenant-b, beside tenant-a (the ``tenant`` fixture)."""
    admin.create_namespace(OTHER_TENANT)
    yield OTHER_TENANT
    for item in admin.resource(KFDEF_API, "KfDef").get(namespace=OTHER_TENANT).items:  # after a failure
        admin.resource(KFDEF_API, "KfDef").patch(name=item.metadata.name, namespace=OTHER_TENANT,
                                                 body={"metadata": {"finalizers": None}},
                                                 content_type="application/merge-patch+json")
    admin.delete_namespace(OTHER_TENANT)
    wait_for(lambda: admin.get("v1", "Namespace", OTHER_TENANT) is None, timeout=120, what="tenant-b gone")


def configmaps_for_default(admin: Kube, namespace: str) -> None:
    """The namespace's ServiceAccount ``default`` (which its stacks act as, include/multi-tenant) may manage
    ConfigMaps there."""
    admin.apply({"apiVersion": RBAC, "kind": "Role", "metadata": {"name": "configmaps", "namespace": namespace},
                 "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["*"]}]})
    admin.apply({"apiVersion": RBAC, "kind": "RoleBinding", "metadata": {"name": "configmaps", "namespace": namespace},
                 "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "configmaps"},
                 "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": namespace}]})


def kfdef_of(name: str, namespace: str, uri: str, path: str) -> dict:
    return {"apiVersion": KFDEF_API, "kind": "KfDef", "metadata": {"name": name, "namespace": namespace},
            "spec": {"repos": [{"name": "manifests", "uri": uri}],
                     "applications": [{"name": "app", "kustomizeConfig": {"repoRef": {"name": "manifests",
                                                                                      "path": path}}}]}}


@pytest.mark.cluster
def test_two_tenants_with_remote_bases_on_get_neither_each_others_repository_nor_the_operators_network(
        plane, admin, multi_tenant, tenant, tenant_b, tmp_path, internal, reliability):
    """Multi-tenant install, --no-remote-bases=false: tenant-b names tenant-a's repository in the operator's git
    mirror (file://), an internal URL and the operator's /metrics"""
    for namespace in (TENANT, OTHER_TENANT):
        configmaps_for_default(admin, namespace)
    commit = private_repository(tmp_path / "a-private")
    process = start_operator(plane, tmp_path, *multi_tenant, "--no-remote-bases=false",
                             env={"KFDEF_ALLOWED_SOURCE_NETWORKS": ""})  # no internal network, as in production
    try:
        admin.apply(kfdef_of("private", TENANT, f"git+file://{tmp_path / 'a-private'}?ref={commit}", "pkg"))
        wait_ready(admin, "private", TENANT)
        [mirror] = [head.parent for head in (process.work_dir / "cache" / "sources" / "git").glob("*/HEAD")]
        mirror_base = f"file://{mirror}//pkg?ref={commit}"
        tenant_repository(tmp_path / "b-mirror", {"resources": [mirror_base]})
        tenant_repository(tmp_path / "b-network", {"configMapGenerator": [{"name": "leak", "files": [
            f"internal={internal.url('/secret')}", f"metrics={process.url}/metrics"]}]})
        admin.apply(kfdef_of("mirror", OTHER_TENANT, str(tmp_path / "b-mirror"), "app"))
        admin.apply(kfdef_of("network", OTHER_TENANT, str(tmp_path / "b-network"), "app"))
        messages = {name: condition(wait_condition_reason(admin, name, OTHER_TENANT, "Degraded", "True",
                                                          "RenderFailed", timeout=120), "Degraded")["message"]
                    for name in ("mirror", "network")}
        assert f"'{mirror_base}' names a repository on the operator's own disk (file://)" in messages["mirror"], \
            messages
        assert ("refused to fetch a remote base or URL: 127.0.0.1 is an internal address (loopback)"
                in messages["network"]), messages
        leaked = [item.metadata.name for item in admin.core.list_namespaced_config_map(OTHER_TENANT).items
                  if any(text in json.dumps(item.data or {}) for text in (MARKER, "internal-secret", "kfdef_"))]
        assert leaked == [], f"tenant-b's ConfigMaps hold what is not its own: {leaked}"
        assert not internal.routes["/secret"].hits, "the internal URL was fetched"
        assert admin.get("v1", "ConfigMap", "private", TENANT)["data"] == {"m": MARKER}  # tenant-a's own, intact
        delete_kfdefs(admin, OTHER_TENANT)
        delete_kfdefs(admin, TENANT)
    finally:
        process.stop()
    reliability.figure("tenant-b refused", "file:// into the git mirror; loopback URL and the operator's /metrics")
    reliability.figure("tenant-b ConfigMaps holding another's data", 0)
