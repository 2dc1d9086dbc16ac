"""Kubernetes Events on KfDefs, written for the person on call.

Repeats of the same event (same KfDef, type, reason and message) are
aggregated into one Event whose ``count`` and ``lastTimestamp`` grow, as
kubelet and client-go's recorder do, so a retry loop shows as one line with
a count in ``kubectl describe``. Posting an event never fails a reconcile: a
refused event is logged and dropped.
"""

from __future__ import annotations

import collections
import logging
import socket
from dataclasses import dataclass

from kfdef_operator.api.names import API_VERSION, COMPONENT, KIND
from kfdef_operator.runtime.conditions import now, truncate
from kfdef_operator.runtime.ownership import Owner
from kfdef_operator.ssa.client import KubeApiError, KubeClient

log = logging.getLogger(__name__)

_REMEMBERED = 1024  # aggregation keys kept; the oldest is forgotten first


@dataclass
class _Posted:
    name: str
    count: int


class EventRecorder:
    """Posts core/v1 Events about KfDefs, aggregating repeats."""

    def __init__(self, kube: KubeClient) -> None:
        self._kube = kube
        self._instance = socket.gethostname()
        self._posted: collections.OrderedDict[tuple[str, ...], _Posted] = collections.OrderedDict()

    async def record(self, owner: Owner, event_type: str, reason: str, message: str) -> None:
        message = truncate(message)
        key = (owner.namespace, owner.name, owner.uid, event_type, reason, message)
        timestamp = now()
        try:
            posted = self._posted.get(key)
            if posted is not None and await self._repeat(owner, posted, timestamp):
                self._posted.move_to_end(key)
                return
            self._posted[key] = await self._post(owner, event_type, reason, message, timestamp)
            while len(self._posted) > _REMEMBERED:
                self._posted.popitem(last=False)
        except (KubeApiError, OSError) as error:
            log.warning("could not post event %s on %s: %s", reason, owner, error)

    async def _repeat(self, owner: Owner, posted: _Posted, timestamp: str) -> bool:
        """Count one more occurrence on the Event posted before; False when that Event is gone."""
        try:
            await self._kube.request(
                "PATCH", f"/api/v1/namespaces/{owner.namespace}/events/{posted.name}",
                body={"count": posted.count + 1, "lastTimestamp": timestamp},
                content_type="application/merge-patch+json")
        except KubeApiError as error:
            if error.status == 404:  # expired (events live an hour) or deleted: post a new one
                return False
            raise
        posted.count += 1
        return True

    async def _post(self, owner: Owner, event_type: str, reason: str, message: str, timestamp: str) -> _Posted:
        event = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"generateName": f"{owner.name}.", "namespace": owner.namespace},
            "involvedObject": {"apiVersion": API_VERSION, "kind": KIND, "name": owner.name,
                               "namespace": owner.namespace, "uid": owner.uid},
            "type": event_type, "reason": reason, "message": message,
            "source": {"component": COMPONENT}, "reportingComponent": COMPONENT,
            "reportingInstance": self._instance, "firstTimestamp": timestamp, "lastTimestamp": timestamp, "count": 1,
        }
        created = await self._kube.request("POST", f"/api/v1/namespaces/{owner.namespace}/events", body=event)
        return _Posted(created["metadata"]["name"], 1)
