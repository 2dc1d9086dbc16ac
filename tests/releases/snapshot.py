"""Every object of a cluster, to show that a deploy and teardown leave nothing behind and touch nothing else.

A snapshot lists every resource that can be listed, at each group's preferred version, and keeps each object
without what changes by itself (``status``, ``resourceVersion``, ``managedFields``). Events and Leases are left
out: the control plane writes them all the time. Groups whose discovery fails (an APIService without a backend)
are skipped and named.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from kubernetes.client.rest import ApiException

from tests.kube import Kube, wait_for

JSON = dict[str, Any]
Identity = tuple[str, str, str, str]  # group, kind, namespace, name
_SKIPPED = {("", "Event"), ("events.k8s.io", "Event"), ("coordination.k8s.io", "Lease")}
_VOLATILE = ("resourceVersion", "managedFields")


def _get(kube: Kube, path: str) -> JSON:
    return json.loads(kube.dynamic.request("GET", path, serialize=False).data)


def _steady(obj: JSON) -> JSON:
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k not in _VOLATILE}
    return {**{k: v for k, v in obj.items() if k not in ("status", "metadata")}, "metadata": meta}


@dataclass
class Snapshot:
    objects: dict[Identity, JSON] = field(default_factory=dict)
    unreadable: list[str] = field(default_factory=list)  # groups or resources that could not be listed

    @classmethod
    def take(cls, kube: Kube) -> Snapshot:
        snapshot = cls()
        versions = [("", "/api/v1")] + [
            (group["name"], f"/apis/{group['preferredVersion']['groupVersion']}")
            for group in _get(kube, "/apis")["groups"]]
        for group, prefix in versions:
            try:
                resources = _get(kube, prefix)["resources"]
            except ApiException as error:
                snapshot.unreadable.append(f"{prefix} ({error.status})")
                continue
            for resource in resources:
                if "/" in resource["name"] or "list" not in resource.get("verbs", []):
                    continue
                if (group, resource["kind"]) in _SKIPPED:
                    continue
                try:
                    items = _get(kube, f"{prefix}/{resource['name']}")["items"]
                except ApiException as error:
                    snapshot.unreadable.append(f"{prefix}/{resource['name']} ({error.status})")
                    continue
                for item in items:
                    meta = item.get("metadata") or {}
                    identity = (group, resource["kind"], meta.get("namespace") or "", meta.get("name", ""))
                    snapshot.objects[identity] = _steady(item)
        return snapshot

    @classmethod
    def settled(cls, kube: Kube, *, quiet: float = 2.0, timeout: float = 60.0) -> Snapshot:
        """A snapshot of the cluster at rest: two snapshots at least ``quiet`` seconds apart that are the same.

        A guard, not a proven need: a control plane that has just started may still be filling in objects of its
        own (the rules of the aggregated ClusterRoles, the Node's annotations and taints), and a snapshot taken
        halfway through would blame the teardown for the rest. On an idle machine the first snapshot was already
        at rest in 5 of 5 trials; this costs about 2.5 s.
        """
        previous, taken = cls.take(kube), time.monotonic()

        def at_rest() -> Snapshot | None:
            nonlocal previous, taken
            current, now = cls.take(kube), time.monotonic()
            if current != previous:
                previous, taken = current, now
                return None
            return current if now - taken >= quiet else None
        return wait_for(at_rest, timeout=timeout, what=f"the cluster to stay unchanged for {quiet:.0f} s")

    def compare(self, later: Snapshot) -> dict[str, list[str]]:
        """What ``later`` holds that this snapshot did not, what it lost, and what changed (empty lists: same).

        A changed object is named with the fields that differ (``metadata`` by its keys), for the person reading a
        failure.
        """
        def shown(identity: Identity) -> str:
            group, kind, namespace, name = identity
            return f"{kind}{'.' + group if group else ''} {namespace + '/' if namespace else ''}{name}"

        def fields(old: JSON, new: JSON) -> list[str]:
            return sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))

        def changes(identity: Identity) -> str:
            old, new = self.objects[identity], later.objects[identity]
            differing = [f for f in fields(old, new) if f != "metadata"]
            differing += [f"metadata.{f}" for f in fields(old["metadata"], new["metadata"])]
            return f"{shown(identity)} ({', '.join(differing)})"

        before, after = set(self.objects), set(later.objects)
        return {"left over": sorted(shown(i) for i in after - before),
                "gone": sorted(shown(i) for i in before - after),
                "changed": sorted(changes(i) for i in before & after if self.objects[i] != later.objects[i])}
