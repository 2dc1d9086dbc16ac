"""When a CRD must have its stored versions migrated before it can be applied, and the plan to do so (pure).

kube-apiserver keeps, in a CRD's ``status.storedVersions``, every version objects of its kind may be stored at in
etcd, and refuses a CRD whose ``spec.versions`` drops one of them (:func:`is_stored_version_refusal`): objects
stored at it could no longer be read. A new release that drops an old version (Kubeflow v1.2.0's katib CRDs drop
v1alpha3) is applied after the migration kube-storage-version-migrator performs, which
:mod:`~kfdef_operator.ssa.migration` runs with the :class:`MigrationPlan` made here:

- the *bridge* CRD: the CRD as rendered, plus the live entries of the versions it drops that are still stored,
  served but not storage. Applying it changes nothing for the objects (each stays readable at every version it was
  readable at), and from then on every write stores its object at the rendered storage version;
- every object is then rewritten at the rendered storage version, ``storedVersions`` trimmed to it, and the CRD
  applied as rendered.

Rewriting an object also prunes it against the storage version's schema: fields that schema does not declare are
dropped without a word (checked against etcd). With no conversion webhook the API server converts between versions
by changing ``apiVersion`` only, so the object as read at a dropped version and as read at the storage version
differ by exactly what the rewrite would drop (:func:`lost_fields`).
"""

from __future__ import annotations

import base64
import copy
import hashlib
from dataclasses import dataclass
from typing import Any

from kfdef_operator.api.types import JSON
from kfdef_operator.ssa.client import KubeApiError
from kfdef_operator.ssa.discovery import Resource

STORED_VERSIONS_FIELD = "status.storedVersions"


def is_stored_version_refusal(error: KubeApiError) -> bool:
    """Whether the API server refused a CRD because its ``spec.versions`` drops a version still in
    ``status.storedVersions`` (``status.storedVersions[0]: Invalid value: "v1alpha3": missing from spec.versions;
    v1alpha3 was previously a storage version, and must remain in spec.versions until a storage migration ...``)."""
    return error.status == 422 and any(str(cause.get("field") or "").startswith(STORED_VERSIONS_FIELD)
                                       for cause in error.causes)


class NotMigratable(ValueError):
    """The rendered CRD cannot be reached by a migration (it names no single storage version)."""


@dataclass(frozen=True)
class MigrationPlan:
    """How one CRD's stored versions are migrated to its rendered storage version."""

    name: str
    group: str
    kind: str
    plural: str
    namespaced: bool
    #: Versions still in ``status.storedVersions`` that the rendered CRD drops, in that order.
    dropped: tuple[str, ...]
    #: The rendered storage version, which every object is rewritten at.
    storage: str
    #: The rendered CRD plus the live entries of :attr:`dropped`, served but not storage (unstamped).
    bridge: JSON
    #: The API server converts between versions by changing ``apiVersion`` only (no webhook): an object read at a
    #: dropped version and at :attr:`storage` differ only by what pruning against the storage schema drops.
    converted_as_is: bool

    def resource(self, version: str) -> Resource:
        return Resource(self.group, version, self.kind, self.plural, self.namespaced)

    @property
    def storage_version_hash(self) -> str:
        """The ``storageVersionHash`` discovery shows for the kind once the API server stores it at
        :attr:`storage` (the first 8 bytes of the SHA-256 of ``group/version/kind``, base64)."""
        digest = hashlib.sha256(f"{self.group}/{self.storage}/{self.kind}".encode()).digest()
        return base64.b64encode(digest[:8]).decode()


def plan_migration(rendered: JSON, live: JSON) -> MigrationPlan | None:
    """The plan to bring the ``live`` CRD to ``rendered``; None when ``rendered`` keeps every stored version.

    Raises :class:`NotMigratable` when ``rendered`` names no single storage version.
    """
    spec = rendered.get("spec") or {}
    versions = spec.get("versions") or []
    stored = (live.get("status") or {}).get("storedVersions") or []
    dropped = tuple(version for version in stored if version not in {v.get("name") for v in versions})
    if not dropped:
        return None
    storage = [v.get("name") for v in versions if v.get("storage")]
    if len(storage) != 1:
        raise NotMigratable(f"the rendered CRD has {len(storage)} storage versions, not one: its objects stored at "
                            f"{', '.join(dropped)} have no version to be migrated to")
    live_versions = {v.get("name"): v for v in (live.get("spec") or {}).get("versions") or []}
    kept = [{**copy.deepcopy(live_versions.get(version, {"name": version})), "served": True, "storage": False}
            for version in dropped]
    names = spec.get("names") or {}
    return MigrationPlan(
        name=(rendered.get("metadata") or {}).get("name", ""), group=spec.get("group", ""),
        kind=names.get("kind", ""), plural=names.get("plural", ""), namespaced=spec.get("scope") != "Cluster",
        dropped=dropped, storage=str(storage[0]), bridge={**rendered, "spec": {**spec, "versions": [*versions, *kept]}},
        converted_as_is=(spec.get("conversion") or {}).get("strategy", "None") == "None")


def managed_fields_at_storage(managed_fields: list[JSON], plan: MigrationPlan) -> list[JSON] | None:
    """``metadata.managedFields`` with every entry recorded at a version the plan drops moved to its storage
    version; None when no entry names one.

    The API server reads each entry's field set at the entry's own ``apiVersion``: once that version is no longer
    served, every write to the object (a server-side apply, an update, a patch) fails with ``500: request to convert CR
    to an invalid group/version``. kube-storage-version-migrator leaves such entries; a migration that trims the
    version must not. The field sets stay as recorded: a field the storage version names otherwise is owned by nobody
    from then on, which the next apply of its manager corrects.
    """
    dropped = {f"{plan.group}/{version}" for version in plan.dropped}
    if not any(entry.get("apiVersion") in dropped for entry in managed_fields):
        return None
    return [{**entry, "apiVersion": f"{plan.group}/{plan.storage}"} if entry.get("apiVersion") in dropped else entry
            for entry in managed_fields]


def lost_fields(before: Any, after: Any, path: str = "") -> list[str]:
    """The fields ``before`` holds that ``after`` lacks, as paths (``.spec.size``, ``.spec.items[0].name``).

    Maps are compared key by key and lists of the same length item by item; a null value is no field (the API server
    drops it too). Called on whole objects, ``apiVersion`` and ``metadata`` are left out: they are not the object's
    content (and ``apiVersion`` differs by design).
    """
    if not path and isinstance(before, dict):
        before = {key: value for key, value in before.items() if key not in ("apiVersion", "metadata")}
    if isinstance(before, dict) and isinstance(after, dict):
        lost: list[str] = []
        for key, value in before.items():
            if key not in after:
                if value is not None:
                    lost.append(f"{path}.{key}")
            else:
                lost.extend(lost_fields(value, after[key], f"{path}.{key}"))
        return lost
    if isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        return [lost for index, (old, new) in enumerate(zip(before, after, strict=True))
                for lost in lost_fields(old, new, f"{path}[{index}]")]
    return []
