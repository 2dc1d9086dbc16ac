"""The operator process for tests: the development package's, with a test's debugging switch and log report."""

from __future__ import annotations

import os
from pathlib import Path

from kfdef_dev.process import LocalSourcesOperator


class OperatorProcess(LocalSourcesOperator):
    """The operator trusting local sources (:class:`kfdef_dev.process.LocalSourcesOperator`). Extra CLI arguments
    come from ``$KFDEF_TEST_OPERATOR_ARGS`` (e.g. ``-v`` to debug a failing test)."""

    def __init__(self, kubeconfig: Path, work_dir: Path, *, extra_args: tuple[str, ...] = (),
                 env: dict[str, str] | None = None, local_source_roots: tuple[Path, ...] | None = None,
                 wrapper: tuple[str, ...] = ()) -> None:
        super().__init__(kubeconfig, work_dir,
                         extra_args=(*extra_args, *os.environ.get("KFDEF_TEST_OPERATOR_ARGS", "").split()),
                         env=env, local_source_roots=local_source_roots, wrapper=wrapper)
        STARTED.append(self)


#: Every operator process a test created, so that a failing test's report shows their logs (tests/conftest.py).
STARTED: list[OperatorProcess] = []
