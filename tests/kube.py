"""A small synchronous test client over the official kubernetes package, and wait helpers."""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import yaml
from kubernetes import client, config, dynamic
from kubernetes.client.rest import ApiException
from kubernetes.dynamic.exceptions import ResourceNotFoundError

T = TypeVar("T")


def wait_for(check: Callable[[], T], *, timeout: float = 60.0, what: str = "condition",
             max_delay: float = 0.5) -> T:
    """Poll ``check`` until it returns a truthy value; fail with ``what`` after ``timeout`` seconds. The pause
    between polls grows from 20 ms to ``max_delay``: keep that small where the moment of success matters."""
    deadline = time.monotonic() + timeout
    delay = min(0.02, max_delay)
    last_error: Exception | None = None
    while True:
        try:
            value = check()
            if value:
                return value
        except ApiException as error:
            last_error = error
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}"
                                 + (f" (last error: {last_error})" if last_error else ""))
        time.sleep(delay)
        delay = min(delay * 1.5, max_delay)


async def wait_until(what: str, check: Callable[[], Awaitable[T]], timeout: float = 30.0) -> T:
    """Await ``check`` every 50 ms until it returns a truthy value, which is returned; fail with ``what`` after
    ``timeout`` seconds (for tests driving the operator's own async client)."""
    deadline = time.monotonic() + timeout
    while not (found := await check()):
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        await asyncio.sleep(0.05)
    return found


class Kube:
    """Admin access for tests: typed core APIs plus a dynamic client for any kind."""

    def __init__(self, kubeconfig: Path) -> None:
        self.api = config.new_client_from_config(config_file=str(kubeconfig))
        self.core = client.CoreV1Api(self.api)
        self.apps = client.AppsV1Api(self.api)
        # Discovery cached in a file of this client's own: the library's default is a file in /tmp named after the
        # server's URL alone, which a control plane that had the same port before (another run's) wrote.
        self._discovery_dir = tempfile.TemporaryDirectory(prefix="kube-discovery-")
        self.dynamic = dynamic.DynamicClient(self.api, cache_file=f"{self._discovery_dir.name}/discovery.json")

    def close(self) -> None:
        self.api.close()
        self._discovery_dir.cleanup()

    def resource(self, api_version: str, kind: str):
        """The dynamic resource; discovery is refreshed once when the kind is unknown (new CRDs).

        The lookup names its API group, or the core API: without one the library asks every group listed in
        ``/apis`` for its resources of that version, and one group that answers 404 (CI saw
        ``telemetry.istio.io/v1`` do so while listed) fails the lookup of a core kind."""
        group, _, version = api_version.rpartition("/")
        where = {"prefix": "apis", "group": group} if group else {"prefix": "api"}
        try:
            return self.dynamic.resources.get(api_version=version, kind=kind, **where)
        except ResourceNotFoundError:
            self.dynamic.resources.invalidate_cache()
            return self.dynamic.resources.get(api_version=version, kind=kind, **where)

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> dict | None:
        """The live object as a dict, or None when it does not exist."""
        try:
            return self.resource(api_version, kind).get(name=name, namespace=namespace).to_dict()
        except ResourceNotFoundError:
            return None  # the kind is not served (its CRD is gone): no such object
        except ApiException as error:
            if error.status == 404:
                return None
            raise

    def exists(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> bool:
        return self.get(api_version, kind, name, namespace) is not None

    def apply(self, obj: dict, *, manager: str = "tests", force: bool = True) -> dict:
        """Server-side apply of one object."""
        meta = obj["metadata"]
        resource = self.resource(obj["apiVersion"], obj["kind"])
        return resource.server_side_apply(
            body=obj, name=meta["name"], namespace=meta.get("namespace"),
            field_manager=manager, force_conflicts=force,
        ).to_dict()

    def apply_yaml(self, text: str, **kwargs: Any) -> list[dict]:
        return [self.apply(doc, **kwargs) for doc in yaml.safe_load_all(text) if doc]

    def delete(self, api_version: str, kind: str, name: str, namespace: str | None = None, **kwargs: Any) -> None:
        try:
            self.resource(api_version, kind).delete(name=name, namespace=namespace, **kwargs)
        except ApiException as error:
            if error.status != 404:
                raise

    def create_namespace(self, name: str, labels: dict | None = None) -> None:
        self.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name, labels=labels)))

    def delete_namespace(self, name: str) -> None:
        self.delete("v1", "Namespace", name)

    def wait_gone(self, api_version: str, kind: str, name: str, namespace: str | None = None,
                  timeout: float = 60) -> None:
        wait_for(lambda: not self.exists(api_version, kind, name, namespace), timeout=timeout,
                 what=f"{kind} {namespace + '/' if namespace else ''}{name} to be gone")

    def condition(self, obj: dict | None, type_: str) -> dict | None:
        for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
            if cond.get("type") == type_:
                return cond
        return None

    def wait_condition(self, api_version: str, kind: str, name: str, type_: str, status: str = "True",
                       namespace: str | None = None, timeout: float = 60) -> dict:
        def check():
            obj = self.get(api_version, kind, name, namespace)
            cond = self.condition(obj, type_)
            return obj if cond and cond.get("status") == status else None
        return wait_for(check, timeout=timeout, what=f"{kind} {name} condition {type_}={status}")
