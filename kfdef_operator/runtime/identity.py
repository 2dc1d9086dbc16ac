"""Who a stack acts as: the KfDef's service account (impersonated), or the operator itself.

As Flux's kustomize-controller does, every apply, heal, prune and delete of a
KfDef's objects, and every read those need, is sent as a ServiceAccount of
the KfDef's own namespace: ``spec.serviceAccountName``, else the operator's
``--default-service-account``. Without either, the operator's own identity is
used (the single-administrator install, where whoever writes KfDefs is
trusted like cluster-admin). Watches, discovery, the KfDef's status and
finalizer and Events always use the operator's own identity.

All identities share one connection pool: an impersonating
:class:`~kfdef_operator.ssa.client.KubeClient` view is only a header.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from kfdef_operator.ssa.client import KubeApiError, KubeClient, service_account_user
from kfdef_operator.ssa.discovery import Discovery
from kfdef_operator.ssa.live import LiveView, OwnWrites
from kfdef_operator.ssa.manager import ResourceManager


@dataclass(frozen=True)
class StackIdentity:
    """The identity one KfDef's stack acts as."""

    namespace: str
    #: A ServiceAccount of ``namespace``; "" for the operator's own identity.
    service_account: str = ""
    #: The name came from the operator's ``--default-service-account``, not from the KfDef.
    defaulted: bool = False

    @property
    def user(self) -> str | None:
        """The user name impersonated, None for the operator's own identity."""
        return service_account_user(self.namespace, self.service_account) if self.service_account else None

    def __str__(self) -> str:
        if not self.service_account:
            return "the operator's own identity"
        source = "the operator's --default-service-account" if self.defaulted else "spec.serviceAccountName"
        return f"ServiceAccount {self.namespace}/{self.service_account} ({source})"


def explain_forbidden(identity: StackIdentity, error: KubeApiError) -> str:
    """What to do about a refusal (403) of a request made with ``identity``; "" when RBAC did not refuse it.

    The server's message already names the user, verb and resource
    (``User "system:serviceaccount:team-a:deployer" cannot patch resource
    "configmaps" ...``); this adds who can fix it and how.
    """
    text = error.message
    if "cannot impersonate" in text:
        return ("the operator may not impersonate service accounts: grant its own ServiceAccount the verb "
                "impersonate on serviceaccounts (deploy/rbac/cluster-roles.yaml)")
    if " cannot " not in text:  # e.g. a namespace being terminated, a webhook's denial
        return ""
    if identity.service_account:
        return (f"grant it to {identity} with a (Cluster)Role and binding, or name one that has it in "
                "spec.serviceAccountName (docs/security.md)")
    return "the operator's own identity lacks this permission (docs/deployment.md, RBAC)"


class Identities:
    """One :class:`ResourceManager` per identity stacks act as, all on the operator's connection pool."""

    def __init__(self, kube: KubeClient, discovery: Discovery, live: LiveView, *, concurrency: int,
                 default_service_account: str = "", own_writes: OwnWrites | None = None) -> None:
        """``own_writes``: told by every manager the version its applies leave an object at."""
        self._kube = kube
        self._discovery = discovery
        self._live = live
        self._own_writes = own_writes
        self._concurrency = concurrency
        self._default = default_service_account
        self._managers: dict[StackIdentity, ResourceManager] = {}

    def of(self, namespace: str, service_account_name: str) -> StackIdentity:
        """The identity of a KfDef in ``namespace`` whose ``spec.serviceAccountName`` is ``service_account_name``."""
        if service_account_name:
            return StackIdentity(namespace, service_account_name)
        return StackIdentity(namespace, self._default, defaulted=bool(self._default))

    def manager(self, identity: StackIdentity) -> ResourceManager:
        manager = self._managers.get(identity)
        if manager is None:
            manager = ResourceManager(self._kube.impersonating(identity.user), self._discovery, self._live,
                                      concurrency=self._concurrency,
                                      explain_forbidden=lambda error: explain_forbidden(identity, error),
                                      owners=self._kube, own_writes=self._own_writes)
            self._managers[identity] = manager
        return manager

    def retain(self, identities: Iterable[StackIdentity]) -> None:
        """Forget the managers of identities no stack uses any more."""
        keep = set(identities)
        for identity in [i for i in self._managers if i not in keep]:
            del self._managers[identity]

    async def unavailable(self, identity: StackIdentity) -> str | None:
        """Why the stack cannot act as ``identity`` (its ServiceAccount does not exist), or None.

        The API server lets the operator impersonate a ServiceAccount that does
        not exist (the user name then holds whatever is bound to that name and
        to the service-account groups), so existence is checked here, with the
        operator's own identity, as Flux does.
        """
        if not identity.service_account:
            return None
        path = f"/api/v1/namespaces/{identity.namespace}/serviceaccounts/{identity.service_account}"
        if await self._kube.get(path) is not None:
            return None
        fix = ("create it, or set spec.serviceAccountName to an existing one" if identity.defaulted
               else "create it, or correct spec.serviceAccountName")
        return f"the stack acts as {identity}, which does not exist: {fix}; nothing is applied or deleted meanwhile"
