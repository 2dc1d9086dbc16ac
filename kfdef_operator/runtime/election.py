"""Leader election on a ``coordination.k8s.io/v1`` Lease, for an asyncio operator.

Semantics are client-go's ``tools/leaderelection`` with a Lease lock:

- The Lease's ``spec.holderIdentity`` names the leader; ``renewTime`` and
  ``leaseDurationSeconds`` say how long its claim lasts. Every change goes
  through an update with the last seen ``resourceVersion`` (optimistic
  concurrency), so of two candidates at most one wins.
- A candidate measures a holder's lease against *its own* clock: from the
  moment it last saw the record change, plus the record's
  ``leaseDurationSeconds``. Clocks of different machines are never compared.
  An empty ``holderIdentity`` is a free lease.
- The leader renews every ``retry_period`` and leads only until
  ``renew_deadline`` past the start of its last successful renewal. A leader
  that cannot renew (API server unreachable, its permission revoked, the
  request hung) therefore stops leading at least ``lease_duration -
  renew_deadline`` seconds before any other candidate may take over.
- On shutdown the leader releases the lease (client-go's
  ``ReleaseOnCancel``): ``holderIdentity`` cleared and
  ``leaseDurationSeconds: 1``, so a successor takes over at once instead of
  after a whole lease duration. The caller must have stopped all work first.

Why not the kubernetes client's own ``kubernetes.leaderelection``: it runs on
the synchronous client in threads (its callback runs in a thread, its renew
loop sleeps with ``time.sleep``), it has no way to release the lease on
shutdown, and its renew loop cannot be bounded by a deadline when a request
hangs. This operator is one asyncio loop over ``kubernetes.aio``.

One difference from client-go: candidates *watch* the Lease (by name) instead
of polling it every retry period. A candidate then sees each renewal when it
happens, so its clock starts when the holder's did, and it sees a release at
once; failover takes the lease duration, a graceful handover milliseconds.
Without a working watch (permission missing, connection trouble) candidates
poll every ``retry_period`` as client-go does.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from kfdef_operator.api.types import JSON
from kfdef_operator.backoff import exponential
from kfdef_operator.ssa.client import KubeApiError, KubeClient

log = logging.getLogger(__name__)

LEASES = "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
_WATCH_TIMEOUT_S = 290


def micro_time(at: datetime.datetime | None = None) -> str:
    """A ``metav1.MicroTime`` string (RFC 3339 with microseconds, UTC)."""
    at = at or datetime.datetime.now(datetime.UTC)
    return at.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True)
class LeaseRecord:
    """What a Lease says about its holder (``spec``), and the ``resourceVersion`` it was read at."""

    holder: str
    duration_s: float
    acquire_time: str | None
    renew_time: str | None
    transitions: int
    resource_version: str

    @classmethod
    def of(cls, lease: JSON) -> LeaseRecord:
        spec = lease.get("spec") or {}
        return cls(holder=spec.get("holderIdentity") or "", duration_s=float(spec.get("leaseDurationSeconds") or 0),
                   acquire_time=spec.get("acquireTime"), renew_time=spec.get("renewTime"),
                   transitions=int(spec.get("leaseTransitions") or 0),
                   resource_version=(lease.get("metadata") or {}).get("resourceVersion", ""))

    def claim(self) -> tuple[str, float, str | None, str | None, int]:
        """The holder's claim, without the resourceVersion: a change of it restarts a candidate's clock."""
        return self.holder, self.duration_s, self.acquire_time, self.renew_time, self.transitions


@dataclass(frozen=True)
class ElectionConfig:
    """Where the lock is, who we are, and client-go's three timings (its defaults)."""

    namespace: str
    name: str
    identity: str
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    release_on_cancel: bool = True

    def __post_init__(self) -> None:
        if not 0 < self.retry_period < self.renew_deadline < self.lease_duration:
            raise ValueError(f"leader election needs retry period ({self.retry_period:g}s) < renew deadline "
                             f"({self.renew_deadline:g}s) < lease duration ({self.lease_duration:g}s)")


class LeaseElector:
    """Campaigns for one Lease; calls ``on_started`` when it starts leading and ``on_stopped`` when it stops.

    Both callbacks are plain functions, called synchronously at the moment
    leadership changes, so that whatever they stop is stopped before anything
    else runs on the loop. :meth:`leading` is the authority for a write fence:
    it turns False at the renew deadline even if nothing else has run yet.
    """

    def __init__(self, kube: KubeClient, config: ElectionConfig, *, on_started: Callable[[], None],
                 on_stopped: Callable[[], None]) -> None:
        self._kube = kube
        self.config = config
        self._on_started = on_started
        self._on_stopped = on_stopped
        self._path = LEASES.format(namespace=config.namespace)
        self._observed: LeaseRecord | None = None
        self._written: JSON | None = None     # the Lease as our last successful write returned it
        self._observed_at = 0.0          # monotonic time the holder's claim was last seen to change
        self._changed = asyncio.Event()  # the watch saw the Lease change
        self._leader_until = 0.0         # monotonic: start of the last successful renewal + renew deadline
        self._is_leader = False
        self._task: asyncio.Task[None] | None = None
        self._watcher: asyncio.Task[None] | None = None
        self.transitions_observed = 0

    @property
    def lease(self) -> str:
        return f"{self.config.namespace}/{self.config.name}"

    def leading(self) -> bool:
        """Whether this process leads right now (and may write)."""
        return self._is_leader and time.monotonic() < self._leader_until

    def holder(self) -> str:
        """The holder as last seen ('' when free or unknown)."""
        return self._observed.holder if self._observed else ""

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        self._watcher = asyncio.create_task(self._watch(), name=f"watch lease {self.lease}")
        self._task = asyncio.create_task(self._campaign(), name=f"leader election {self.lease}")

    def running(self) -> bool:
        """False when the campaign ended by itself (a bug): the process should be restarted."""
        return self._task is not None and not self._task.done()

    async def stop(self) -> None:
        """Stop campaigning; a leader releases the lease (``release_on_cancel``) after ``on_stopped``.

        Call it only once every writer has stopped: the successor may write as soon as the lease is released.
        """
        for task in (self._task, self._watcher):
            if task is not None:
                task.cancel()
        await asyncio.gather(*(t for t in (self._task, self._watcher) if t is not None), return_exceptions=True)
        was_leading = self.leading()
        self._stop_leading("shutting down")
        if was_leading and self.config.release_on_cancel:
            await self._release()

    # -- campaign --------------------------------------------------------------------------------

    async def _campaign(self) -> None:
        log.info("%s: campaigning for the leader lease %s", self.config.identity, self.lease)
        while True:
            await self._acquire()
            self._is_leader = True
            log.info("%s: leading (lease %s)", self.config.identity, self.lease)
            self._on_started()
            reason = await self._keep_leading()
            self._stop_leading(reason)

    def _stop_leading(self, reason: str) -> None:
        if not self._is_leader:
            return
        self._is_leader = False
        self._leader_until = 0.0
        log.warning("%s: stopped leading (lease %s): %s", self.config.identity, self.lease, reason)
        self._on_stopped()

    async def _acquire(self) -> None:
        """Return once this candidate holds the lease."""
        while True:
            if self._may_acquire():
                try:
                    if await self._try_acquire_or_renew():
                        return
                except Exception as error:  # the API server is unreachable or refuses: try again later
                    log.warning("%s: could not acquire lease %s: %s", self.config.identity, self.lease,
                                error or type(error).__name__)
            await self._wait_for_change(self._next_attempt_in())

    def _may_acquire(self) -> bool:
        record = self._observed
        return (record is None or not record.holder or record.holder == self.config.identity
                or time.monotonic() >= self._observed_at + record.duration_s)

    def _next_attempt_in(self) -> float:
        """Seconds until the held lease expires (or the fallback poll), jittered so candidates spread out."""
        retry = self.config.retry_period * random.uniform(1.0, 1.2)
        record = self._observed
        if record is None or not record.holder or record.holder == self.config.identity:
            return retry
        expires_in = self._observed_at + record.duration_s - time.monotonic()
        return max(min(expires_in + random.uniform(0.0, 0.05), retry), 0.0)

    async def _wait_for_change(self, timeout: float) -> None:
        # asyncio.timeout, never asyncio.wait_for: on Python 3.11 wait_for can swallow a cancellation that arrives as
        # the awaited thing completes (CPython gh-86296), and stop() then waited for ever (a hang seen in the suite).
        self._changed.clear()
        try:
            async with asyncio.timeout(timeout):
                await self._changed.wait()
        except TimeoutError:
            pass

    async def _keep_leading(self) -> str:
        """Renew every retry period until a renewal fails past the deadline; returns why leadership ended."""
        while True:
            await asyncio.sleep(self.config.retry_period)
            while True:
                remaining = self._leader_until - time.monotonic()
                if remaining <= 0:
                    return f"the lease was not renewed within the renew deadline ({self.config.renew_deadline:g}s)"
                try:
                    async with asyncio.timeout(remaining):
                        renewed = await self._try_acquire_or_renew()
                except TimeoutError:
                    return f"renewing the lease took longer than the renew deadline ({self.config.renew_deadline:g}s)"
                except Exception as error:  # retried until the deadline
                    log.warning("%s: renewing lease %s failed: %s", self.config.identity, self.lease,
                                error or type(error).__name__)
                    renewed = False
                if renewed:
                    break
                if self._observed is not None and self._observed.holder not in ("", self.config.identity):
                    return f"the lease is held by {self._observed.holder}"
                await asyncio.sleep(min(self.config.retry_period, max(self._leader_until - time.monotonic(), 0.0)))

    # -- the lock --------------------------------------------------------------------------------

    async def _try_acquire_or_renew(self) -> bool:
        """One round of client-go's ``tryAcquireOrRenew``: create, take over a free/expired lease, or renew.

        A leader renews straight from the Lease it last wrote (one PUT, no GET); a conflict means someone
        else changed it, and the next round reads it again.
        """
        identity = self.config.identity
        started = time.monotonic()
        now = micro_time()
        if self._is_leader and self._written is not None:
            written, self._written = self._written, None  # read it again next round if this write fails
            return await self._write(written, {"renewTime": now}, started)
        lease = await self._kube.get(f"{self._path}/{self.config.name}")
        if lease is None:
            spec = {"holderIdentity": identity, "leaseDurationSeconds": round(self.config.lease_duration),
                    "acquireTime": now, "renewTime": now, "leaseTransitions": 0}
            try:
                created = await self._kube.request("POST", self._path, body={
                    "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": self.config.name, "namespace": self.config.namespace}, "spec": spec})
            except KubeApiError as error:
                if error.status == 409:  # another candidate created it first
                    return False
                raise
            self._renewed(created, started)
            return True
        record = self._observe(lease)
        if record.holder and record.holder != identity and not self._may_acquire():
            return False
        ours = record.holder == identity
        return await self._write(lease, {
            "holderIdentity": identity, "leaseDurationSeconds": round(self.config.lease_duration),
            "acquireTime": record.acquire_time if ours else now, "renewTime": now,
            "leaseTransitions": record.transitions if ours else record.transitions + 1}, started)

    async def _write(self, lease: JSON, spec: JSON, started: float) -> bool:
        """Update the Lease read (or written) before with ``spec``; False when someone changed it meanwhile."""
        body = {**lease, "spec": {**(lease.get("spec") or {}), **spec}}
        try:
            updated = await self._kube.request("PUT", f"{self._path}/{self.config.name}", body=body)
        except KubeApiError as error:
            if error.status == 409:
                return False
            raise
        self._renewed(updated, started)
        return True

    def _renewed(self, lease: JSON, started: float) -> None:
        """Our write succeeded: we lead until the renew deadline, counted from *before* the request was sent."""
        self._observe(lease)
        self._written = lease
        self._leader_until = started + self.config.renew_deadline

    def _observe(self, lease: JSON) -> LeaseRecord:
        record = LeaseRecord.of(lease)
        previous = self._observed
        if previous is None or previous.claim() != record.claim():
            self._observed_at = time.monotonic()
            if previous is not None and previous.holder != record.holder:
                self.transitions_observed += 1
                log.info("%s: lease %s is now held by %s", self.config.identity, self.lease,
                         record.holder or "nobody (released)")
        self._observed = record
        return record

    async def _release(self) -> None:
        """Hand the lease back: no holder, a one-second duration (client-go's release)."""
        now = micro_time()
        released = {"holderIdentity": None, "leaseDurationSeconds": 1, "acquireTime": now, "renewTime": now}
        try:
            lease = self._written
            if lease is None or not await self._write(lease, released, time.monotonic()):
                lease = await self._kube.get(f"{self._path}/{self.config.name}")
                if lease is None or LeaseRecord.of(lease).holder != self.config.identity:
                    return
                await self._write(lease, released, time.monotonic())
            self._written = None
            log.info("%s: released the leader lease %s", self.config.identity, self.lease)
        except Exception as error:
            log.warning("%s: could not release lease %s (a successor waits for it to expire): %s",
                        self.config.identity, self.lease, error)

    async def _watch(self) -> None:
        """Follow the Lease by name; every change wakes a waiting candidate."""
        failures = 0
        while True:
            try:
                async for event in self._kube.watch(self._path, field_selector=f"metadata.name={self.config.name}",
                                                    timeout_seconds=_WATCH_TIMEOUT_S):
                    kind = event.get("type")
                    if kind in ("ADDED", "MODIFIED"):
                        self._observe(event.get("object") or {})
                    elif kind == "DELETED":
                        self._observed = None
                    elif kind == "ERROR":
                        break  # expired resourceVersion: start over from the current state
                    self._changed.set()
                failures = 0
            except asyncio.CancelledError:
                raise
            except KubeApiError as error:
                failures += 1
                if error.status == 403:  # no watch permission: fall back to polling every retry period
                    log.warning("%s: cannot watch lease %s (%s); polling it every %gs", self.config.identity,
                                self.lease, error.message, self.config.retry_period)
                    return
                log.debug("watch of lease %s failed: %s", self.lease, error)
            except Exception as error:  # connection trouble: resume
                failures += 1
                log.debug("watch of lease %s interrupted: %s", self.lease, error or type(error).__name__)
            if failures:
                # 0.2 s doubling to 6.4 s (five doublings), never longer than the retry period.
                await asyncio.sleep(min(exponential(failures, base=0.2, cap=6.4), self.config.retry_period))
