"""``status.inventory``: the objects a KfDef's stack applied, as the KfDef keeps them (pure).

Prune and teardown act on the inventory after a restart, so it lives in the status, and every status write carries
it: kube-apiserver decodes, prunes, validates and re-encodes the whole KfDef on each one, a readiness change
included. Its entries are therefore strings (:func:`~kfdef_operator.ssa.inventory.entry_of`), grouped by
application, not an object each: with 595 objects, one status write cost kube-apiserver 42.7 ms of CPU with
object entries, 12.4 ms with strings (``python -m bench.status_write``)::

    inventory:
      applications:                     # in status.applications order
      - name: jupyter-web-app
        objects: [kubeflow_jupyter-web-app_apps_Deployment_v1, ...]
      stale: [...]                      # held, no longer rendered: the next prune deletes them
      runOnce: {<id>: <digest>}         # run-once objects (Jobs with a TTL): the content applied

The first format, ``entries: [{id, v, d, a}]`` (``a``: an index in ``status.applications``), is still read,
and the next status write replaces it. A KfDef CRD older than the string format prunes it, as any unknown field,
from every write: an operator upgraded before its CRD would leave each KfDef without an inventory, and teardown
with nothing to delete. :class:`InventoryFormat` learns from the API server's answers which format it keeps.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from kfdef_operator.api.types import JSON
from kfdef_operator.ssa.inventory import ObjectRef, entry_of, parse_entry, parse_id

log = logging.getLogger(__name__)
#: The key every inventory in the string format holds (possibly empty), and no first-format one does.
STRINGS_KEY = "applications"
#: The one key of an inventory in the first format.
FIRST_FORMAT_KEY = "entries"


@dataclass
class InventoryEntry:
    """One object the stack holds: the version it was applied at, and for run-once objects the digest applied."""

    version: str
    run_once: str | None = None


class Held(NamedTuple):
    """One object of a status inventory, with the application rendering it (None: no longer rendered)."""

    ref: ObjectRef
    entry: InventoryEntry
    application: str | None


def encode(inventory: Mapping[ObjectRef, InventoryEntry], application_of: Callable[[ObjectRef], str | None],
           applications: Sequence[str]) -> JSON:
    """``status.inventory`` for ``inventory``, grouped by ``application_of`` in ``applications`` order."""
    groups: dict[str, list[str]] = {name: [] for name in applications}
    stale: list[str] = []
    run_once: dict[str, str] = {}
    for ref, entry in inventory.items():
        application = application_of(ref)
        (stale if application is None else groups.setdefault(application, [])).append(entry_of(ref, entry.version))
        if entry.run_once:
            run_once[ref.id] = entry.run_once
    encoded: JSON = {"applications": [{"name": name, "objects": objects}
                                      for name, objects in groups.items() if objects]}
    if stale:
        encoded["stale"] = stale
    if run_once:
        encoded["runOnce"] = run_once
    return encoded


def encode_first_format(inventory: Mapping[ObjectRef, InventoryEntry],
                        application_of: Callable[[ObjectRef], str | None], applications: Sequence[str]) -> JSON:
    """``status.inventory`` in its first format, for a KfDef CRD that does not keep the string format."""
    index = {name: position for position, name in enumerate(applications)}
    entries = []
    for ref, entry in inventory.items():
        encoded: JSON = {"id": ref.id, "v": entry.version}
        if entry.run_once:
            encoded["d"] = entry.run_once
        application = application_of(ref)
        if application is not None:
            encoded["a"] = index.setdefault(application, len(index))
        entries.append(encoded)
    return {FIRST_FORMAT_KEY: entries}


class InventoryFormat:
    """Which format of ``status.inventory`` the installed KfDef CRD keeps, as the API server's answers show it.

    One per operator process (the CRD is cluster-wide), shared by its status writers. Until a status read or a
    write's answer holds the string format, both formats are written; once a write's answer shows the strings
    pruned, only the first format is, until the operator restarts. The writer that learns it writes again at once,
    in the format learnt: the other one is dropped, or a write that sent strings alone (the CRD replaced by an
    older one meanwhile) left no inventory at all.
    """

    def __init__(self) -> None:
        self.strings_kept: bool | None = None

    def encode(self, inventory: Mapping[ObjectRef, InventoryEntry],
               application_of: Callable[[ObjectRef], str | None], applications: Sequence[str]) -> JSON:
        """``status.inventory`` in the format(s) the CRD is known (or not yet known) to keep."""
        if self.strings_kept is False:
            return encode_first_format(inventory, application_of, applications)
        strings = encode(inventory, application_of, applications)
        if self.strings_kept is None:
            strings.update(encode_first_format(inventory, application_of, applications))
        return strings

    def observe(self, stored: object) -> None:
        """An inventory as the API server holds it: one in the string format proves that the CRD keeps it (the
        API server prunes what the CRD does not know when it reads from etcd too)."""
        if isinstance(stored, dict) and STRINGS_KEY in stored:
            self.strings_kept = True

    def learn(self, sent: JSON, stored: object) -> None:
        """The answer to a status write that sent ``sent`` as the inventory held ``stored``."""
        if STRINGS_KEY not in sent:
            return
        if isinstance(stored, dict) and STRINGS_KEY in stored:
            self.strings_kept = True
            return
        if self.strings_kept is not False:
            log.warning("the KfDef CRD installed prunes status.inventory.%s: it is older than this operator. The "
                        "inventory is written in its first format; apply the CRD of this release (crds/) and "
                        "restart the operator", STRINGS_KEY)
        self.strings_kept = False


def read(status: JSON) -> list[Held]:
    """Every object of ``status.inventory``, malformed entries skipped (an inventory must never block teardown).

    An inventory holding the old ``entries`` is read from them: only a version that knows nothing else writes them,
    so they are the newer when both are there."""
    inventory = status.get("inventory")
    if not isinstance(inventory, dict):
        return []
    if FIRST_FORMAT_KEY in inventory:
        names = [row.get("name") for row in status.get("applications") or [] if isinstance(row, dict)]
        return _read_entries(inventory.get(FIRST_FORMAT_KEY), names)
    run_once = inventory.get("runOnce")
    run_once = run_once if isinstance(run_once, dict) else {}
    held: list[Held] = []
    groups = [(group.get("name"), group.get("objects")) for group in _list(inventory.get("applications"))
              if isinstance(group, dict)]
    for application, entries in [*groups, (None, inventory.get("stale"))]:
        for text in _list(entries):
            try:
                ref, version = parse_entry(text)
            except (ValueError, AttributeError):
                continue
            digest = run_once.get(ref.id)
            held.append(Held(ref, InventoryEntry(version, digest if isinstance(digest, str) and digest else None),
                             application if isinstance(application, str) else None))
    return held


def decode(status: JSON) -> dict[ObjectRef, InventoryEntry]:
    """``status.inventory`` as the stack keeps it (:func:`read`)."""
    return {held.ref: held.entry for held in read(status)}


def _read_entries(entries: object, names: Sequence[object]) -> list[Held]:
    held: list[Held] = []
    for entry in _list(entries):
        try:
            ref = parse_id(entry["id"])
        except (KeyError, ValueError, AttributeError, TypeError):
            continue
        index = entry.get("a")
        application = names[index] if isinstance(index, int) and 0 <= index < len(names) else None
        held.append(Held(ref, InventoryEntry(str(entry.get("v", "")), entry.get("d") or None),
                         application if isinstance(application, str) else None))
    return held


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []
