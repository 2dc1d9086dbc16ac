"""The operator process for tests: the package's launcher with test defaults."""

from __future__ import annotations

import os
from pathlib import Path

from kfdef_dev.process import OperatorProcess as _OperatorProcess


class OperatorProcess(_OperatorProcess):
    """Plain-http sources on loopback allowed (the tests serve tarballs from 127.0.0.1); extra CLI
    arguments from ``$KFDEF_TEST_OPERATOR_ARGS`` (e.g. ``-v`` to debug a failing test)."""

    def __init__(self, kubeconfig: Path, work_dir: Path, *, extra_args: tuple[str, ...] = (),
                 env: dict[str, str] | None = None) -> None:
        super().__init__(kubeconfig, work_dir,
                         extra_args=(*extra_args, *os.environ.get("KFDEF_TEST_OPERATOR_ARGS", "").split()),
                         env={"KFDEF_ALLOW_INSECURE_HTTP": "1", **(env or {})})
