"""Which KfDefs one operator instance serves, and the Lease its replicas campaign for (pure).

- **Namespaces** (install modes): ``-n``/``--namespace`` flags, else the
  comma-separated ``WATCH_NAMESPACE`` (kfctl's operator and the operator SDK
  read it; OLM fills it from the CSV's ``olm.targetNamespaces`` annotation),
  empty meaning all namespaces.
- **Shard**: ``--watch-label-selector`` (Flux's flag) selects KfDefs
  server-side; KfDefs are assigned by the label ``api.names.SHARD_LABEL``
  (``kfdef.apps.kubeflow.org/shard``). Shards
  must select disjoint sets: the default shard takes ``!<label>``.
- **Lease**: replicas of one shard share one Lease; each shard has its own,
  named after ``--shard`` when given (stable across selector changes, so a
  rolling update that changes the selector still hands over), else after a
  digest of the selector.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import socket
from collections.abc import Mapping
from pathlib import Path

from kfdef_operator.api.names import LEASE_NAME

SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


class ScopeError(ValueError):
    """A flag or environment value that cannot be used; the message says which and why."""


def watched_namespaces(flags: list[str] | None, environ: Mapping[str, str]) -> frozenset[str]:
    """The namespaces to serve (empty: all): the ``-n`` flags, else ``WATCH_NAMESPACE``."""
    if flags:
        return frozenset(flags)
    raw = environ.get("WATCH_NAMESPACE", "")
    names = [name.strip() for name in raw.split(",") if name.strip()]
    bad = [name for name in names if not _DNS_LABEL.fullmatch(name)]
    if bad:
        raise ScopeError(f"WATCH_NAMESPACE={raw!r}: not namespace names: {', '.join(bad)} (expected a comma-separated "
                         "list of namespaces, empty for all)")
    return frozenset(names)


def has_globs(namespaces: frozenset[str]) -> bool:
    return any(set(name) & set("*?[") for name in namespaces)


def lease_name(shard: str | None, label_selector: str) -> str:
    """The Lease of this shard's replicas."""
    if shard:
        if not _DNS_LABEL.fullmatch(shard) or len(LEASE_NAME) + 1 + len(shard) > 253:
            raise ScopeError(f"--shard {shard!r}: must be a DNS label (lower-case letters, digits, '-')")
        return f"{LEASE_NAME}-{shard}"
    if label_selector:
        return f"{LEASE_NAME}-{hashlib.sha256(label_selector.encode()).hexdigest()[:10]}"
    return LEASE_NAME


def election_namespace(explicit: str | None, environ: Mapping[str, str],
                       service_account_namespace: Path = SERVICE_ACCOUNT_NAMESPACE) -> str:
    """Where the Lease lives: the flag, else ``POD_NAMESPACE`` (downward API), else the pod's service account's."""
    if explicit:
        return explicit
    if environ.get("POD_NAMESPACE"):
        return environ["POD_NAMESPACE"]
    try:
        return service_account_namespace.read_text().strip()
    except OSError:
        raise ScopeError("leader election needs the namespace of its Lease: set --leader-election-namespace or "
                         "POD_NAMESPACE (not running in a pod)") from None


def instance_identity(environ: Mapping[str, str] = os.environ) -> str:
    """This process among the replicas: the pod name (downward API ``POD_NAME``) or host name, and a random part."""
    return f"{environ.get('POD_NAME') or socket.gethostname()}_{secrets.token_hex(4)}"
