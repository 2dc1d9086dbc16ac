"""Leader election wired into a running operator: the reconciler's gate, the API client's write fence, metrics.

The elector runs on its own API client (a small connection pool of its own),
so that renewals never queue behind a large apply. The operator's client is
fenced by :meth:`LeaseElector.leading`: past the renew deadline no write
leaves this process, even before the reconciler has been told.
"""

from __future__ import annotations

import logging

from kfdef_operator.controller.reconciler import Reconciler
from kfdef_operator.runtime import metrics
from kfdef_operator.runtime.election import ElectionConfig, LeaseElector
from kfdef_operator.ssa.client import KubeClient

log = logging.getLogger(__name__)


class Leadership:
    """One replica's part in its shard's election."""

    def __init__(self, kube: KubeClient, lease_kube: KubeClient, config: ElectionConfig,
                 reconciler: Reconciler) -> None:
        self._reconciler = reconciler
        self._lease_kube = lease_kube
        self._stopping = False
        self.elector = LeaseElector(lease_kube, config, on_started=self._started, on_stopped=self._stopped)
        kube.fence = self.elector.leading
        metrics.LEADER.labels(self.elector.lease).set(0)

    def start(self) -> None:
        self.elector.start()

    def alive(self) -> bool:
        return self._reconciler.alive() and self.elector.running()

    def ready(self) -> bool:
        """A warm standby is ready too: a rolling update must be able to bring it up before the leader goes."""
        return self._reconciler.ready()

    def _started(self) -> None:
        metrics.LEADER.labels(self.elector.lease).set(1)
        self._reconciler.take_over()

    def _stopped(self) -> None:
        metrics.LEADER.labels(self.elector.lease).set(0)
        if not self._stopping:  # at shutdown the reconciler has stopped already
            self._reconciler.step_down()

    async def stop(self) -> None:
        """Leave the election; the lease is released (when configured). Stop the reconciler first."""
        self._stopping = True
        await self.elector.stop()
        metrics.LEADER.remove(self.elector.lease)
        await self._lease_kube.close()
