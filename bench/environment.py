"""What the results were measured on: machine, versions, flags, workload and plan."""

from __future__ import annotations

import dataclasses
import datetime
import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

from kfdef_operator.api.types import JSON

from .cluster import APISERVER_FLAGS, CONTROLLER_MANAGER_FLAGS
from .plan import Plan
from .workload import Workload

if TYPE_CHECKING:
    from .context import Bench


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def _memory_gib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return round(int(line.split()[1]) / 1024 / 1024, 1)
    return 0.0


def _first_line(*command: str) -> str:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=10, check=False)
    except OSError as error:
        return f"unavailable ({error})"
    return (done.stdout or done.stderr).strip().splitlines()[0] if (done.stdout or done.stderr) else ""


async def describe(bench: Bench, workload: Workload, plan: Plan) -> JSON:
    version = await bench.kube.request("GET", "/version")
    return {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": {"cpu": _cpu_model(), "cores": os.cpu_count(), "memory_gib": _memory_gib(),
                    "kernel": platform.release(), "load_average_at_end": os.getloadavg()},
        "versions": {"python": platform.python_version(), "kube-apiserver": version.get("gitVersion"),
                     "kubectl": _first_line("kubectl", "version", "--client"),
                     "kustomize": _first_line("kustomize", "version"),
                     **{name: metadata.version(name) for name in ("kfdef-operator", "kopf", "kubernetes", "aiohttp")}},
        "flags": {"kube-apiserver": list(APISERVER_FLAGS), "kube-controller-manager": list(CONTROLLER_MANAGER_FLAGS)},
        "control_plane_start_s": round(bench.control_plane.startup_seconds, 1),
        "workload": {"objects": workload.total, "by_kind": workload.counts, "namespaces": len(workload.namespaces),
                     "crds_over_256kib": workload.crds_over_256kib,
                     "largest_crd_kib": round(workload.largest_crd_bytes / 1024)},
        "plan": {**dataclasses.asdict(plan), "skip": sorted(plan.skip)},
    }
