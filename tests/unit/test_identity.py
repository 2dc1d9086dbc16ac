"""Who a stack acts as, and what a refusal (403) tells the person on call (pure parts of runtime.identity)."""

from __future__ import annotations

import asyncio

from kubernetes.aio import client as aio_client

from kfdef_operator.runtime.identity import Identities, StackIdentity, explain_forbidden
from kfdef_operator.ssa.client import KubeApiError, KubeClient, service_account_user


def identities(default: str = "") -> Identities:
    return Identities(kube=None, discovery=None, live=None, concurrency=1,  # type: ignore[arg-type]  # no I/O here
                      default_service_account=default)


def forbidden(message: str) -> KubeApiError:
    return KubeApiError(403, "PATCH", "/x", {"reason": "Forbidden", "message": message})


def test_the_kfdefs_own_service_account_wins_then_the_default_then_the_operator():
    assert identities("default").of("team-a", "deployer") == StackIdentity("team-a", "deployer")
    assert identities("default").of("team-a", "").user == "system:serviceaccount:team-a:default"
    assert identities("default").of("team-a", "").defaulted
    assert identities().of("team-a", "").user is None
    assert str(identities().of("team-a", "")) == "the operator's own identity"


def test_a_refusal_says_who_lacks_what_and_what_to_do():
    sa = StackIdentity("team-a", "default", defaulted=True)
    lacking = forbidden('configmaps "c" is forbidden: User "system:serviceaccount:team-a:default" cannot patch '
                        'resource "configmaps" in API group "" in the namespace "team-a"')
    assert explain_forbidden(sa, lacking) == (
        "grant it to ServiceAccount team-a/default (the operator's --default-service-account) with a (Cluster)Role "
        "and binding, or name one that has it in spec.serviceAccountName (docs/security.md)")
    not_impersonating = forbidden('users "system:serviceaccount:team-a:default" is forbidden: User "kfdef-operator" '
                                  'cannot impersonate resource "serviceaccounts" in API group ""')
    assert "impersonate on serviceaccounts" in explain_forbidden(sa, not_impersonating)
    assert "operator's own identity" in explain_forbidden(StackIdentity("team-a"), lacking)
    terminating = forbidden('unable to create new content in namespace team-a because it is being terminated')
    assert explain_forbidden(sa, terminating) == ""


def test_an_impersonating_view_sends_only_the_user_and_shares_the_pool():
    async def headers() -> tuple[dict, dict, bool, bool]:
        configuration = aio_client.Configuration(host="https://127.0.0.1:1")
        configuration.api_key = {"BearerToken": "Bearer t"}
        kube = KubeClient(aio_client.ApiClient(configuration))
        view = kube.impersonating(service_account_user("team-a", "deployer"))
        try:
            return (await kube._headers("application/json", "application/json"),
                    await view._headers("application/json", "application/json"),
                    view.impersonating(None)._api is kube._api, kube.impersonating(None) is kube)
        finally:
            await kube.close()
    own, impersonated, shared, same = asyncio.run(headers())
    assert "Impersonate-User" not in own and own["Authorization"] == "Bearer t"
    assert impersonated["Impersonate-User"] == "system:serviceaccount:team-a:deployer"
    assert impersonated["Authorization"] == "Bearer t"
    assert not any(key.startswith("Impersonate-Group") for key in impersonated)
    assert shared and same
