"""Who holds a live object, the interface through which an owner tells the resource manager, and the rule both
share.

The manager applies, prunes and deletes objects on behalf of one *owner*
(for this operator, a KfDef), but knows nothing of what an owner is: the
owner's :class:`Ownership` stamps desired objects, classifies live ones and
says which of them a person took out of its hands. :func:`left_alone` is the
one ownership rule of every write to an object, an apply's and a heal's.
"""

from __future__ import annotations

import enum
from typing import Protocol

from kfdef_operator.api.types import JSON
from kfdef_operator.ssa.changeset import Action, Change
from kfdef_operator.ssa.inventory import ObjectRef


class Claim(enum.Enum):
    """Who holds a live object, from the point of view of one owner."""

    ABSENT = "absent"
    OURS = "ours"            # created by this owner
    ADOPTED = "adopted"      # existed before; applied by this owner, never deleted by it
    UNCLAIMED = "unclaimed"  # exists without any owner's stamp: adopted on apply
    FOREIGN = "foreign"      # another owner's: a conflict, left alone


class Ownership(Protocol):
    """One owner's stamps and rules."""

    @property
    def field_manager(self) -> str:
        """The server-side apply field manager."""

    def claim(self, live_meta: JSON | None) -> Claim:
        """Classify a live object's metadata (None when absent)."""

    def holder(self, live_meta: JSON) -> str:
        """Who holds a :attr:`Claim.FOREIGN` object, for messages."""

    def holder_path(self, live_meta: JSON) -> str | None:
        """The API path of the owner a :attr:`Claim.FOREIGN` object's stamp names, when the stamp names one (a
        stamp naming an owner that does not exist is nobody's: the object counts as unclaimed)."""

    def stamp(self, obj: JSON, *, namespaced: bool, adopted: bool) -> JSON:
        """The desired object with the owner's stamps: a new object (``obj`` is not modified), read-only."""

    def unchanged(self, live_meta: JSON, stamped: JSON) -> bool:
        """Whether the live object already carries exactly this stamped desired state."""

    def opted_out(self, live_meta: JSON | None) -> bool:
        """Whether a person took the live object out of the owner's hands (no apply, heal or delete)."""

    def release_patch(self) -> JSON:
        """A JSON merge patch removing the owner's stamps."""

    def touch_patch(self) -> JSON:
        """A JSON merge patch that changes an object without changing what it means, for a controller that acts
        only on changes."""


def left_alone(ownership: Ownership, ref: ObjectRef, claim: Claim, live_meta: JSON | None, *, adopt: bool,
               keep_absent: str | None = None) -> Change | None:
    """The :class:`Change` of an object the owner must leave as it is, or None when it may write it under ``claim``.

    The one rule of every write to an object (:meth:`Applier.apply_one` and :meth:`Restorer.restore`), in this order:

    - another owner's object (:attr:`Claim.FOREIGN`) is a conflict;
    - one a person took out of the owner's hands (:meth:`Ownership.opted_out`) is skipped;
    - an absent one that is to stay absent (``keep_absent`` says why) is skipped;
    - one without any owner's stamps (:attr:`Claim.UNCLAIMED`) is adopted when ``adopt``; else it is someone
      else's, a conflict.
    """
    if claim is Claim.FOREIGN:
        assert live_meta is not None
        return Change(ref, Action.CONFLICT, f"already managed by {ownership.holder(live_meta)}; not applied")
    if ownership.opted_out(live_meta):
        return Change(ref, Action.SKIPPED, "reconcile disabled on the object by annotation; not applied")
    if claim is Claim.ABSENT and keep_absent is not None:
        return Change(ref, Action.SKIPPED, keep_absent)
    if claim is Claim.UNCLAIMED and not adopt:
        return Change(ref, Action.CONFLICT, "exists without the owner's stamps, so it is someone else's; left alone")
    return None
