"""What every part of the resource manager talks through: one client, discovery, an optional watch cache.

:class:`ApiAccess` is built once per :class:`~kfdef_operator.ssa.manager.ResourceManager` and shared by its
lookup, apply, teardown and waits. It owns how many requests run at once and how a failed request is worded for a
person (a refusal, 403, with what to do about it); this module also holds the request details they have in common
(metadata-only content types, the delete options that guard a delete, the dry-run parameter).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

from kfdef_operator.api.types import JSON
from kfdef_operator.ssa.client import KubeApiError, KubeClient, describe_api_error
from kfdef_operator.ssa.discovery import Discovery
from kfdef_operator.ssa.live import LiveView

T = TypeVar("T")

METADATA_ONLY = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
ONE_METADATA_ONLY = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


@dataclass(frozen=True)
class ApiAccess:
    """The client (acting as one identity), discovery, the watch cache if any, and the concurrency bound."""

    kube: KubeClient
    discovery: Discovery
    live: LiveView | None
    concurrency: int
    explain_forbidden: Callable[[KubeApiError], str] | None

    def describe(self, error: BaseException) -> str:
        """An error as one line for a person; a refusal (403) with what to do about it."""
        if not isinstance(error, KubeApiError):
            return f"{type(error).__name__}: {error}"
        text = describe_api_error(error)
        if error.status == 403 and self.explain_forbidden is not None:
            text += f"; {self.explain_forbidden(error)}"
        return text

    async def gather(self, coroutines: list[Coroutine[Any, Any, T]]) -> list[T | BaseException]:
        return await self.kube.gather_limited(coroutines, self.concurrency)


def delete_body(uid: str | None, resource_version: str | None = None) -> JSON:
    """DeleteOptions that delete only the very object judged (its uid; with ``resource_version``, also only that
    version of it), dependents in the background."""
    body: JSON = {"propagationPolicy": "Background"}
    preconditions = {key: value for key, value in (("uid", uid), ("resourceVersion", resource_version)) if value}
    if preconditions:
        body["preconditions"] = preconditions
    return body


def dry_run_params(dry_run: bool) -> dict[str, str] | None:
    return {"dryRun": "All"} if dry_run else None
