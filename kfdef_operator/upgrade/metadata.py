"""Every ObjectMeta an object embeds, and the ``initializers`` field dropped from each (pure).

``initializers`` was removed in Kubernetes 1.14 and the server refuses it, served version or not (Kubeflow v1.0.2's
spark-operator Deployment has it in its pod template).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from kfdef_operator.upgrade.conversion import JsonObject


def embedded_metadata(obj: JsonObject, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every ObjectMeta an object carries, with its path: its own, and those of the templates under its spec (pod
    and job templates, nested as a CronJob nests them, and each of a StatefulSet's volume claim templates)."""
    yield (*path, "metadata"), obj.get("metadata")
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    for key in ("template", "jobTemplate"):
        if isinstance(spec.get(key), dict):
            yield from embedded_metadata(spec[key], (*path, "spec", key))
    claims = spec.get("volumeClaimTemplates")
    for index, claim in enumerate(claims if isinstance(claims, list) else []):
        if isinstance(claim, dict):
            yield from embedded_metadata(claim, (*path, "spec", f"volumeClaimTemplates[{index}]"))


def drop_initializers(obj: JsonObject) -> tuple[str, ...]:
    """Removes ``initializers`` (an ObjectMeta field removed in Kubernetes 1.14) from every ObjectMeta of ``obj``."""
    notes = []
    for path, metadata in list(embedded_metadata(obj)):
        if isinstance(metadata, dict) and "initializers" in metadata:
            del metadata["initializers"]
            notes.append(f"{'.'.join(path)}.initializers dropped: the field was removed in Kubernetes 1.14")
    return tuple(notes)


def carries_initializers(obj: JsonObject) -> bool:
    """Whether any ObjectMeta of ``obj`` still has ``initializers``."""
    return any(isinstance(metadata, dict) and "initializers" in metadata for _, metadata in embedded_metadata(obj))
