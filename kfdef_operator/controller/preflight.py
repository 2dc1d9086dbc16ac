"""Can we work against this cluster? Checked once, before the operator (or a command) starts.

Without these checks a missing kubeconfig ends in a traceback from the client library, and kopf retries
its login every minute forever. Here every problem becomes one :class:`ClusterError` saying what is wrong
and what to do: the kubeconfig (missing, unreadable, not a kubeconfig), the API server (unreachable, an
untrusted certificate, credentials refused), the KfDef API (CRD not installed, not allowed to list).

The operator's check also waits out the moments after the KfDef CRD was (re)installed, when the API server
answers 429 "storage is (re)initializing": the client retries those quietly, so kopf's first list does not
log them as errors.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import yaml

from kfdef_operator.api.names import CRD_NAME, GROUP, PLURAL, VERSION
from kfdef_operator.ssa.client import UNREACHABLE, KubeApiError, KubeClient, certificate_problem, describe_api_error

CONNECT_TIMEOUT_S = 20.0


class ClusterError(Exception):
    """The cluster cannot be used; ``usage`` is True when the user's own input (a kubeconfig path) is at fault."""

    def __init__(self, message: str, *, usage: bool = False) -> None:
        super().__init__(message)
        self.usage = usage


def credentials_source(kubeconfig: str | None) -> str:
    """Where the credentials come from, in the words a person would use."""
    if kubeconfig:
        return f"kubeconfig {kubeconfig}"
    if os.environ.get("KUBECONFIG"):
        return f"$KUBECONFIG ({os.environ['KUBECONFIG']})"
    if Path("~/.kube/config").expanduser().exists() or not os.environ.get("KUBERNETES_SERVICE_HOST"):
        return "kubeconfig ~/.kube/config"
    return "the pod's service account"


def kubeconfig_problem(kubeconfig: str | None) -> str | None:
    """Why the kubeconfig that would be used cannot be (None when it looks usable, or in-cluster)."""
    if kubeconfig:
        paths = [kubeconfig]
    elif os.environ.get("KUBECONFIG"):
        paths = [p for p in os.environ["KUBECONFIG"].split(os.pathsep) if p]
    elif os.environ.get("KUBERNETES_SERVICE_HOST") and not Path("~/.kube/config").expanduser().exists():
        return None  # in a pod: the service account
    else:
        paths = [str(Path("~/.kube/config").expanduser())]
    path = Path(paths[0]).expanduser()
    hint = "pass --kubeconfig FILE or set KUBECONFIG"
    if not path.exists():
        return f"kubeconfig {path} does not exist ({hint})"
    if not path.is_file():
        return f"kubeconfig {path} is not a file ({hint})"
    try:
        config = yaml.safe_load(path.read_text())
    except OSError as error:
        return f"kubeconfig {path} cannot be read: {error.strerror or error}"
    except yaml.YAMLError:
        return f"kubeconfig {path} is not valid YAML"
    if not isinstance(config, dict) or not config.get("clusters"):
        return f"kubeconfig {path} defines no cluster"
    if not config.get("current-context"):
        return f"kubeconfig {path} has no current-context (kubectl config use-context NAME)"
    return None


async def connect(kubeconfig: str | None) -> KubeClient:
    """A client whose API server answered and accepted its credentials, or :class:`ClusterError`."""
    problem = kubeconfig_problem(kubeconfig)
    if problem:
        raise ClusterError(problem, usage=True)
    source = credentials_source(kubeconfig)
    try:
        kube = await KubeClient.connect(kubeconfig)
    except Exception as error:  # the library's errors for bad files are TypeErrors, KeyErrors, ConfigExceptions...
        raise ClusterError(f"{source} cannot be used: {type(error).__name__}: {error}", usage=True) from None
    try:
        await asyncio.wait_for(kube.request("GET", "/version", timeout=CONNECT_TIMEOUT_S / 2), CONNECT_TIMEOUT_S)
    except BaseException as error:
        await kube.close()
        if isinstance(error, (asyncio.CancelledError, KeyboardInterrupt)):
            raise
        raise ClusterError(_unreachable(kube.host, source, error)) from None
    return kube


def credentials_revoked(kubeconfig: str | None, detail: str) -> str:
    """What to say when the API server stops accepting credentials it accepted at start-up."""
    return (f"the API server stopped accepting the credentials from {credentials_source(kubeconfig)} (401 "
            f"Unauthorized; {detail}): a ServiceAccount's token is revoked when the ServiceAccount, or the pod it "
            "was issued to, is deleted, and a kubeconfig's token may expire. Give the operator valid credentials and "
            "start it again")


def _unreachable(host: str, source: str, error: BaseException) -> str:
    where = f"{host} ({source})" if source else host
    if isinstance(error, KubeApiError) and error.status == 401:
        return (f"the API server at {host} refused the credentials from {source} (401 Unauthorized): the token or "
                "client certificate is invalid or expired")
    if isinstance(error, KubeApiError):
        return f"the API server at {where} answered GET /version with {describe_api_error(error)}"
    untrusted = certificate_problem(error)
    if untrusted is not None:
        return f"the API server at {host} presented a certificate that the CA in {source} does not trust: {untrusted}"
    if isinstance(error, asyncio.TimeoutError):
        return f"the API server at {where} did not answer within {CONNECT_TIMEOUT_S:.0f}s"
    return f"cannot reach the API server at {where}: {error}"


async def check_kfdef_api(kube: KubeClient, namespaces: list[str] | None = None, label_selector: str = "") -> None:
    """The KfDef CRD is served and KfDefs may be listed where the operator watches them, with its label selector.

    A full list, as kopf's first one: the API server serves it from its watch cache, which is what is briefly
    unavailable after the CRD changed. A selector the API server refuses would leave the operator watching
    nothing.
    """
    paths = ([f"/apis/{GROUP}/{VERSION}/namespaces/{ns}/{PLURAL}" for ns in namespaces if "*" not in ns]
             if namespaces else [f"/apis/{GROUP}/{VERSION}/{PLURAL}"])
    for path in paths:
        try:
            await kube.request("GET", path, params={"labelSelector": label_selector or None})
        except KubeApiError as error:
            if error.status == 400 and label_selector:
                raise ClusterError(f"--watch-label-selector {label_selector!r}: {error.message}") from None
            if error.status == 404:
                raise ClusterError(f"the KfDef API ({GROUP}/{VERSION}) is not served by {kube.host}: install the CRD "
                                   f"{CRD_NAME} first (docs/deployment.md)") from None
            if error.status == 403:
                raise ClusterError(f"not allowed to list KfDefs at {kube.host} ({error.message}): bind the operator's "
                                   "ClusterRole kfdef-operator (docs/deployment.md#rbac)") from None
            raise ClusterError(f"cannot list KfDefs at {kube.host}: {describe_api_error(error)}") from None
        except UNREACHABLE as error:
            raise ClusterError(_unreachable(kube.host, "", error)) from None
