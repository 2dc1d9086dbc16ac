"""One bench part run alone (``python -m bench.ha``, ``python -m bench.upgrade``, ``python -m bench.profile_apply``):
its own control plane, archive server and KfDef stream, and an operator process that is never started (the part
brings its own); and where its figures go: merged into an existing results file, whose report is written again."""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

from kfdef_dev.process import LocalSourcesOperator
from kfdef_operator.api.types import JSON
from kfdef_operator.ssa.client import KubeClient

from . import report
from .archive_server import ArchiveServer
from .cluster import start_control_plane
from .context import KFDEFS_PATH, Bench
from .streams import EventStream

T = TypeVar("T")


async def run_alone(work_dir: Path, part: Callable[[Bench], Awaitable[T]]) -> T:
    """``part(bench)`` on a control plane started for it and stopped after it."""
    control_plane = await asyncio.to_thread(start_control_plane)
    kube = await KubeClient.connect(str(control_plane.kubeconfig))
    try:
        (work_dir / "archives").mkdir(parents=True, exist_ok=True)
        with ArchiveServer(work_dir / "archives") as archives:
            kfdefs = await EventStream(kube, KFDEFS_PATH).start()
            unused = LocalSourcesOperator(control_plane.kubeconfig, work_dir / "operator")
            try:
                return await part(Bench(control_plane, kube, archives, work_dir, unused, kfdefs))
            finally:
                await kfdefs.close()
    finally:
        await kube.close()
        await asyncio.to_thread(control_plane.stop)


ROOT = Path(__file__).resolve().parents[1]
QUICK_DIR = ROOT / "build" / "bench-quick"


def add_output_arguments(parser: argparse.ArgumentParser) -> None:
    """``--out`` and ``--docs`` (:func:`output_paths`); the parser must have ``--quick``."""
    parser.add_argument("--out", type=Path, help="results file to merge into (default bench/results.json; "
                                                 "with --quick build/bench-quick/results.json)")
    parser.add_argument("--docs", type=Path, help="where benchmarks.md and .png go (default docs/; with --quick "
                                                  "build/bench-quick/)")


def output_paths(args: argparse.Namespace) -> tuple[Path, Path]:
    """The results file and the report's directory the arguments name, or their defaults."""
    out = args.out or (QUICK_DIR / "results.json" if args.quick else ROOT / "bench" / "results.json")
    return out, args.docs or (QUICK_DIR if args.quick else ROOT / "docs")


def merge_into(out: Path, docs: Path, figures: JSON, *, replaced: tuple[str, ...] = ()) -> None:
    """``figures`` merged into the results file ``out`` (its entries starting with any of ``replaced`` dropped first,
    everything else kept), and the report written again to ``docs`` when the file holds a whole session."""
    previous = json.loads(out.read_text()) if out.exists() else {}
    results = {**{key: value for key, value in previous.items() if not (replaced and key.startswith(replaced))},
               **figures}
    out.parent.mkdir(parents=True, exist_ok=True)
    if "meta" in results:  # a whole session's results: the report can be written again
        report.write(results, out, docs)
    else:
        out.write_text(json.dumps(results, indent=2) + "\n")
