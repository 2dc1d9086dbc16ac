"""Who holds a live object, and the interface through which an owner tells the resource manager.

The manager applies, prunes and deletes objects on behalf of one *owner*
(for this operator, a KfDef), but knows nothing of what an owner is: the
owner's :class:`Ownership` stamps desired objects, classifies live ones and
says which of them a person took out of its hands.
"""

from __future__ import annotations

import enum
from typing import Protocol

from kfdef_operator.api.types import JSON


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
