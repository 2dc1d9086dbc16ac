"""How a step's failure reads in status and when the run after it is due.

:class:`Fail` is raised by the steps of a run with the condition it should show; :func:`explain` words any other
exception.
"""

from __future__ import annotations

import asyncio

from kfdef_operator.runtime.stack import Failure
from kfdef_operator.ssa.client import KubeApiError, describe_api_error


class Fail(Exception):
    """A step's failure as it should appear in status: reason, message, and whether a retry can help."""

    def __init__(self, reason: str, message: str, *, retry: bool, base: float = 5.0) -> None:
        super().__init__(message)
        self.failure = Failure(reason, message, retry)
        self.base = base


def explain(error: BaseException) -> Failure:
    """An unexpected exception as a condition a person can act on."""
    if isinstance(error, KubeApiError):
        if error.status == 403:
            return Failure("Forbidden", f"the API server refused {error.method} {error.path}: {error.message}; the "
                                        "operator's identity lacks this permission (see docs/deployment.md, RBAC)",
                           retrying=True)
        return Failure("ApiError", f"{error.method} {error.path}: {describe_api_error(error)}", retrying=True)
    if isinstance(error, asyncio.TimeoutError):
        return Failure("Timeout", "timed out waiting for the API server (a watch did not sync, or a request hung); "
                                  "retrying", retrying=True)
    return Failure("ReconcileError", f"{type(error).__name__}: {error}", retrying=True)
