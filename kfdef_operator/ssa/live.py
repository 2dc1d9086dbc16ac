"""What the resource manager may know of live objects without asking the API server.

A watch-fed cache (the runtime's tracker) implements :class:`LiveView`; the
manager then reads ownership stamps, digests and health from memory instead of
listing. Without one, everything is looked up. :class:`OwnWrites` tells which
versions of objects the manager's own writes produced.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from kfdef_operator.api.types import JSON
from kfdef_operator.ssa import health
from kfdef_operator.ssa.foreign import Foreign, described, held_by_others
from kfdef_operator.ssa.inventory import ObjectRef, ref_of, version_of


@dataclass(frozen=True)
class LiveObject:
    """A compact summary of a live object: identity, versions, selected metadata and health."""

    ref: ObjectRef
    version: str
    uid: str
    resource_version: str
    meta: JSON  # {"labels": {...}, "annotations": {...}}: only the keys the summary was asked to keep
    health: health.Health
    #: Fields other managers hold and the owner does not (:func:`~kfdef_operator.ssa.foreign.held_by_others`), as
    #: (manager, path), when the summary was asked for them: their values are not judged.
    foreign: frozenset[Foreign] = frozenset()


def summarize(obj: JSON, *, labels: Iterable[str], annotations: Iterable[str],
              foreign_to: str | None = None) -> LiveObject:
    """The summary of ``obj`` keeping only the given label and annotation keys; with ``foreign_to``, a field
    manager, also the fields other managers hold and it does not."""
    meta = obj.get("metadata") or {}
    live_labels = meta.get("labels") or {}
    live_annotations = meta.get("annotations") or {}
    return LiveObject(
        ref=ref_of(obj), version=version_of(obj), uid=meta.get("uid", ""),
        resource_version=meta.get("resourceVersion", ""),
        meta={"labels": {k: live_labels[k] for k in labels if k in live_labels},
              "annotations": {k: live_annotations[k] for k in annotations if k in live_annotations}},
        health=health.assess(obj),
        foreign=frozenset(described(held_by_others(obj, foreign_to))) if foreign_to else frozenset(),
    )


class OwnWrites:
    """The resourceVersion at which this operator's last write of each object left it, until its watch event.

    The event carrying that version shows the object exactly as the write's answer did: nothing anyone else
    changed, so nothing for the healer to compare (a release's first apply brings one such event per object, and
    comparing a CRD's schema costs milliseconds). Any other version of the object is someone else's change, or a
    status update of the server's, and is compared as before.
    """

    def __init__(self) -> None:
        self._versions: dict[ObjectRef, str] = {}
        self._recreating: dict[ObjectRef, str] = {}  # the uid an apply deletes to create the object again

    def wrote(self, ref: ObjectRef, answer: JSON) -> None:
        """``answer`` is the API server's answer to a write of ``ref`` (not a dry run) by this operator."""
        version = (answer.get("metadata") or {}).get("resourceVersion")
        if version:
            self._versions[ref] = version

    def recreating(self, ref: ObjectRef, uid: str) -> None:
        """An apply is about to delete the object of this ``uid`` and create it again (an immutable field changed)."""
        self._recreating[ref] = uid

    def deleted_to_recreate(self, ref: ObjectRef, uid: str) -> bool:
        """Whether the deletion of the object of ``uid`` is an apply's, which creates it again itself (no heal):
        asked for its DELETED event, so the answer is given once and then forgotten."""
        if not uid or self._recreating.get(ref) != uid:
            return False
        del self._recreating[ref]
        return True

    def produced(self, ref: ObjectRef, resource_version: str) -> bool:
        """Whether ``resource_version`` is the one this operator's last write of ``ref`` produced. Asked for the
        event carrying it, so the answer is given once and then forgotten."""
        if not resource_version or self._versions.get(ref) != resource_version:
            return False
        del self._versions[ref]
        return True


class LiveView(Protocol):
    """Read access to a cache of live objects kept current by watches."""

    def get(self, ref: ObjectRef) -> LiveObject | None:
        """The object's summary, or None when it is absent or its kind is not watched."""

    def is_watched(self, group: str, kind: str, namespace: str = "") -> bool:
        """Whether the cache holds every object of this kind (in ``namespace``), so None from :meth:`get` means
        absent."""

    async def next_event(self, ref: ObjectRef, timeout: float) -> None:
        """Return at the next watch event of ``ref`` (added, changed or deleted), or after ``timeout`` seconds."""
