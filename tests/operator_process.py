"""The operator process for tests: the package's launcher with test defaults."""

from __future__ import annotations

import os
from pathlib import Path

from kfdef_dev.process import OperatorProcess as _OperatorProcess


class OperatorProcess(_OperatorProcess):
    """The operator with the tests' source trust settings, each explicit (the production defaults refuse all three):
    plain http (``KFDEF_ALLOW_INSECURE_HTTP``) from loopback (``KFDEF_ALLOWED_SOURCE_NETWORKS``), where the tests
    serve tarballs, and local sources under ``local_source_roots`` (``KFDEF_LOCAL_SOURCE_ROOTS``; default: the
    directory holding ``work_dir``, pytest's base directory in which every test writes its stacks; the operator
    never reads its own work directory as a source). Extra CLI arguments come from ``$KFDEF_TEST_OPERATOR_ARGS``
    (e.g. ``-v`` to debug a failing test)."""

    def __init__(self, kubeconfig: Path, work_dir: Path, *, extra_args: tuple[str, ...] = (),
                 env: dict[str, str] | None = None, local_source_roots: tuple[Path, ...] | None = None,
                 wrapper: tuple[str, ...] = ()) -> None:
        roots = local_source_roots if local_source_roots is not None else (work_dir.parent,)
        super().__init__(kubeconfig, work_dir,
                         extra_args=(*extra_args, *os.environ.get("KFDEF_TEST_OPERATOR_ARGS", "").split()),
                         env={"KFDEF_ALLOW_INSECURE_HTTP": "1", "KFDEF_ALLOWED_SOURCE_NETWORKS": "127.0.0.0/8",
                              "KFDEF_LOCAL_SOURCE_ROOTS": os.pathsep.join(str(r) for r in roots), **(env or {})},
                         wrapper=wrapper)
        STARTED.append(self)


#: Every operator process a test created, so that a failing test's report shows their logs (tests/conftest.py).
STARTED: list[OperatorProcess] = []
