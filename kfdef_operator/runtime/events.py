"""Kubernetes Events on KfDefs, written for the person on call.

Posting an event never fails a reconcile: a refused event is logged and
dropped.
"""

from __future__ import annotations

import logging
import socket
from typing import Any

from kfdef_operator.ssa.client import KubeApiError, KubeClient
from kfdef_operator.runtime.ownership import KFDEF_API_VERSION, Owner
from kfdef_operator.runtime.conditions import now, truncate

log = logging.getLogger(__name__)

JSON = dict[str, Any]
COMPONENT = "kfdef-operator"


class EventRecorder:
    """Posts core/v1 Events about KfDefs."""

    def __init__(self, kube: KubeClient) -> None:
        self._kube = kube
        self._instance = socket.gethostname()

    async def record(self, body: JSON, event_type: str, reason: str, message: str) -> None:
        meta = body["metadata"]
        await self.record_for(Owner(meta["name"], meta["namespace"], meta.get("uid", "")), event_type, reason, message)

    async def record_for(self, owner: Owner, event_type: str, reason: str, message: str) -> None:
        timestamp = now()
        event = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"generateName": f"{owner.name}.", "namespace": owner.namespace},
            "involvedObject": {"apiVersion": KFDEF_API_VERSION, "kind": "KfDef", "name": owner.name,
                               "namespace": owner.namespace, "uid": owner.uid},
            "type": event_type, "reason": reason, "message": truncate(message),
            "source": {"component": COMPONENT}, "reportingComponent": COMPONENT,
            "reportingInstance": self._instance, "firstTimestamp": timestamp, "lastTimestamp": timestamp, "count": 1,
        }
        try:
            await self._kube.request("POST", f"/api/v1/namespaces/{owner.namespace}/events", body=event)
        except (KubeApiError, OSError) as error:
            log.warning("could not post event %s on KfDef %s/%s: %s", reason, owner.namespace, owner.name, error)
