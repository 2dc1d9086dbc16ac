"""``python -m bench.status_write``: what one KfDef status write costs kube-apiserver, by inventory format.

Every status write (a readiness change after a heal too) makes kube-apiserver decode, prune, default, validate and
re-encode the whole KfDef, then send it to every watcher. The inventory is most of a KfDef's bytes and nodes. Two
KfDefs hold the inventory of the synthetic workload (rendered as the operator renders it), one in each format the
operator reads: ``strings`` (``kfdef_operator.runtime.inventory.encode``, what it writes) and ``objects`` (the
first format: ``{id, v, a}`` per object). Then ``WRITES`` merge patches of ``status.summary`` are sent to each, one
at a time, as the operator's status writer sends them; kube-apiserver's CPU seconds over them (``/proc``, its idle
rate over ``IDLE_S`` before subtracted) are divided by the writes. No operator runs meanwhile.

The figures go to ``build/bench-status-write/results.json`` (or ``--out``); ``python -m bench`` measures them too.
Must run inside ``tools/netns-run``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as ``python bench/status_write.py``
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    __package__ = "bench"  # noqa: A001

from kfdef_operator.api.names import kfdef_path  # noqa: E402
from kfdef_operator.api.types import JSON  # noqa: E402
from kfdef_operator.runtime.inventory import InventoryEntry, encode, encode_first_format  # noqa: E402
from kfdef_operator.ssa.inventory import ObjectRef, ref_of, version_of  # noqa: E402

from .baselines import render_in_place  # noqa: E402
from .cluster import KFDEF_NAMESPACE, process_cpu_s  # noqa: E402
from .context import KFDEFS_PATH, Bench  # noqa: E402
from .standalone import run_alone  # noqa: E402
from .stats import summary  # noqa: E402

log = logging.getLogger("bench.status_write")
ROOT = Path(__file__).resolve().parents[1]
FORMATS = ("strings", "objects")
WRITES = 100
ROUNDS = 3
IDLE_S = 2.0


def inventories(held: list[tuple[ObjectRef, str, str]], applications: list[str]) -> dict[str, JSON]:
    """``status.inventory`` of ``held`` (object, version, application) in each format, as the operator writes it."""
    inventory = {ref: InventoryEntry(version) for ref, version, _ in held}
    application_of = {ref: application for ref, _, application in held}.get
    return {"strings": encode(inventory, application_of, applications),
            "objects": encode_first_format(inventory, application_of, applications)}


def _rendered(bench: Bench) -> tuple[list[tuple[ObjectRef, str, str]], list[str]]:
    """The synthetic workload's objects as the operator renders them: (object, version, application)."""
    workload, _ = bench.new_workload(1.0)
    kfdef = workload.kfdef("inventory", KFDEF_NAMESPACE, str(workload.root))
    rendered, _ = render_in_place(kfdef, workload.root, bench.work_dir / "status-write")
    held = [(ref_of(obj), version_of(obj), app.name) for app in rendered for obj in app.objects]
    return held, [app.name for app in rendered]


def _status(inventory: JSON, held: int, applications: list[str], ready: int) -> JSON:
    """A Ready status as the operator writes it for a stack of ``held`` objects."""
    per_application = held // max(len(applications), 1)
    return {"observedGeneration": 1,
            "conditions": [{"type": kind, "status": status, "reason": reason, "message": f"all {held} objects "
                            "applied and ready", "lastTransitionTime": "2026-01-01T00:00:00Z",
                            "observedGeneration": 1}
                           for kind, status, reason in (("Ready", "True", "Ready"), ("Reconciling", "False", "Done"),
                                                        ("Degraded", "False", "AsExpected"))],
            "summary": {"total": held, "applied": held, "ready": ready, "failed": 0, "upgraded": 0},
            "applications": [{"name": name, "total": per_application, "applied": per_application,
                              "ready": per_application, "failed": 0} for name in applications],
            "failures": [], "inventory": inventory}


async def _cpu_per_write(bench: Bench, name: str, held: int) -> tuple[float, float]:
    """Milliseconds of kube-apiserver CPU per status write to KfDef ``name`` (idle rate subtracted), and the
    median milliseconds each write took."""
    pid = bench.control_plane.pid("kube-apiserver")
    path = kfdef_path(KFDEF_NAMESPACE, name) + "/status"
    idle_from = sum(process_cpu_s(pid))
    await asyncio.sleep(IDLE_S)
    idle_rate = (sum(process_cpu_s(pid)) - idle_from) / IDLE_S
    took = []
    started, cpu_from = time.monotonic(), sum(process_cpu_s(pid))
    for write in range(WRITES):
        sent = time.monotonic()
        await bench.kube.request("PATCH", path, body={"status": {"summary": {"ready": held - write % 2}}},
                                 content_type="application/merge-patch+json")
        took.append((time.monotonic() - sent) * 1000)
    cpu = sum(process_cpu_s(pid)) - cpu_from - idle_rate * (time.monotonic() - started)
    return cpu / WRITES * 1000, statistics.median(took)


async def measure(bench: Bench) -> dict[str, JSON]:
    """The results-file entries: per format, kube-apiserver CPU per status write and its latency, and the KfDef's
    size; ``ROUNDS`` rounds, the formats alternating."""
    held, applications = await asyncio.to_thread(_rendered, bench)
    formats = inventories(held, applications)
    sizes = {}
    for form, inventory in formats.items():
        name = f"status-write-{form}"
        await bench.kube.request("POST", KFDEFS_PATH, body={
            "apiVersion": "kfdef.apps.kubeflow.org/v1", "kind": "KfDef",
            "metadata": {"name": name, "namespace": KFDEF_NAMESPACE}, "spec": {"applications": []}})
        stored = await bench.kube.request("PATCH", kfdef_path(KFDEF_NAMESPACE, name) + "/status",
                                          body={"status": _status(inventory, len(held), applications, len(held))},
                                          content_type="application/merge-patch+json")
        sizes[form] = len(json.dumps(stored, separators=(",", ":")))
    cpu: dict[str, list[float]] = {form: [] for form in FORMATS}
    took: dict[str, list[float]] = {form: [] for form in FORMATS}
    for _ in range(ROUNDS):
        for form in FORMATS:
            ms, latency = await _cpu_per_write(bench, f"status-write-{form}", len(held))
            cpu[form].append(ms)
            took[form].append(latency)
    for form in FORMATS:
        await bench.kube.request("DELETE", kfdef_path(KFDEF_NAMESPACE, f"status-write-{form}"))
    figures = {}
    for form in FORMATS:
        note = f"{len(held)} objects, KfDef {sizes[form]:,} bytes; {WRITES} writes per round"
        figures[f"status_write.{form}.apiserver_cpu_ms"] = summary(cpu[form], "ms", value=statistics.median(cpu[form]),
                                                                   note=note)
        figures[f"status_write.{form}.latency_ms"] = summary(took[form], "ms", value=statistics.median(took[form]),
                                                             note="median per round")
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.status_write", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "bench-status-write" / "results.json")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    with tempfile.TemporaryDirectory(prefix="kfdef-bench-status-write-", dir="/dev/shm") as work_dir:
        figures = asyncio.run(run_alone(Path(work_dir), measure))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(figures, indent=1) + "\n")
    for key, entry in figures.items():
        log.info("%s: %.1f %s (min %.1f, max %.1f, n %d)", key, entry["median"], entry["unit"], entry["min"],
                 entry["max"], entry["n"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
