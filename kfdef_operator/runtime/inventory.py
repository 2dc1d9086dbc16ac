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
and the next status write replaces it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from kfdef_operator.api.types import JSON
from kfdef_operator.ssa.inventory import ObjectRef, entry_of, parse_entry, parse_id


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


def read(status: JSON) -> list[Held]:
    """Every object of ``status.inventory``, malformed entries skipped (an inventory must never block teardown).

    An inventory holding the old ``entries`` is read from them: only a version that knows nothing else writes them,
    so they are the newer when both are there."""
    inventory = status.get("inventory")
    if not isinstance(inventory, dict):
        return []
    if "entries" in inventory:
        names = [row.get("name") for row in status.get("applications") or [] if isinstance(row, dict)]
        return _read_entries(inventory.get("entries"), names)
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
