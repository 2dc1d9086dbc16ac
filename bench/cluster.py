"""The benchmark's control plane and what the benchmarks read from kube-apiserver itself.

One embedded :class:`ControlPlane` with the benchmark-only flags of
``docs/control-plane.md`` section 5 (no priority-and-fairness, no in-flight
limits; KCM allowed more client QPS), the KfDef CRD, a namespace for the
KfDefs and a second fake node so that the scale runs never run out of pod
slots. kube-apiserver's own ``/metrics`` is read raw (Prometheus text) to
count requests server-side, whoever sent them.
"""

from __future__ import annotations

import json
import os
import re
import ssl
import time
import urllib.request
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import yaml

from kfdef_dev.controlplane import FAKE_NODE_NAME, ControlPlane

ROOT = Path(__file__).resolve().parents[1]
KFDEF_CRD_FILE = ROOT / "crds" / "kfdef.apps.kubeflow.org_kfdefs.yaml"
KFDEF_NAMESPACE = "bench"
APISERVER_FLAGS = ("--enable-priority-and-fairness=false", "--max-requests-inflight=0",
                   "--max-mutating-requests-inflight=0")
CONTROLLER_MANAGER_FLAGS = ("--kube-api-qps=100", "--kube-api-burst=200")
# Verbs of apiserver_request_total that change something.
WRITE_VERBS = frozenset({"POST", "PUT", "PATCH", "DELETE", "DELETECOLLECTION", "APPLY", "CREATE", "UPDATE"})

_SAMPLE = re.compile(r'^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})? (?P<value>\S+)')
_LABEL = re.compile(r'(?P<key>[a-zA-Z_][a-zA-Z0-9_]*)="(?P<value>(?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class Sample:
    """One line of a Prometheus text page."""

    name: str
    labels: dict[str, str]
    value: float


def start_control_plane() -> ControlPlane:
    """A running control plane with the benchmark flags, an audit log of writes (who wrote what; see
    :func:`writes_by_client`), the KfDef CRD and the KfDefs' namespace."""
    control_plane = ControlPlane(apiserver_flags=APISERVER_FLAGS, controller_manager_flags=CONTROLLER_MANAGER_FLAGS,
                                 audit=True)
    control_plane.start()
    try:
        _add_second_node(control_plane)
        crd = yaml.safe_load(KFDEF_CRD_FILE.read_text())
        control_plane.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd, ok=(201, 409))
        control_plane.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                             "metadata": {"name": KFDEF_NAMESPACE}}, ok=(201, 409))
        _wait_established(control_plane, crd["metadata"]["name"])
    except BaseException:
        control_plane.stop()
        raise
    return control_plane


def _add_second_node(control_plane: ControlPlane) -> None:
    """A copy of the fake node under another name; kwok (``--manage-all-nodes``) runs it too."""
    node = control_plane.request("GET", f"/api/v1/nodes/{FAKE_NODE_NAME}")
    name = FAKE_NODE_NAME[:-1] + "1"
    labels = {**node["metadata"]["labels"], "kubernetes.io/hostname": name}
    copy = {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": labels, "annotations": node["metadata"]["annotations"]},
            "status": {"capacity": node["status"]["capacity"], "allocatable": node["status"]["allocatable"]}}
    control_plane.request("POST", "/api/v1/nodes", copy, ok=(201, 409))


def _wait_established(control_plane: ControlPlane, crd_name: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        crd = control_plane.request("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd_name}")
        conditions = ((crd or {}).get("status") or {}).get("conditions") or []
        if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
            return
        time.sleep(0.05)
    raise TimeoutError(f"CRD {crd_name} not Established after {timeout:.0f}s")


def apiserver_metrics(control_plane: ControlPlane) -> list[Sample]:
    """kube-apiserver's ``/metrics`` page, parsed."""
    request = urllib.request.Request(control_plane.server + "/metrics",
                                     headers={"Authorization": f"Bearer {control_plane.admin_token}"})
    context = ssl.create_default_context(cafile=str(control_plane.ca_file))
    with urllib.request.urlopen(request, context=context, timeout=30) as response:
        return parse_metrics(response.read().decode())


def parse_metrics(text: str) -> list[Sample]:
    samples = []
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match is None or line.startswith("#"):
            continue
        labels = {m["key"]: m["value"] for m in _LABEL.finditer(match["labels"] or "")}
        samples.append(Sample(match["name"], labels, float(match["value"])))
    return samples


def _counts_stack(labels: dict[str, str], resources: frozenset[str]) -> bool:
    """Requests on the stack's own objects (not their status, which controllers write), KfDefs and events."""
    resource = labels.get("resource", "")
    if resource in ("kfdefs", "events"):
        return True
    return resource in resources and labels.get("subresource", "") == ""


def stack_writes(samples: list[Sample], resources: frozenset[str]) -> dict[str, int]:
    """Server-side write requests (dry runs excluded) on the stack's resources, as ``"VERB resource"`` counts."""
    counts: dict[str, int] = {}
    for s in samples:
        if (s.name == "apiserver_request_total" and s.labels.get("verb") in WRITE_VERBS
                and s.labels.get("dry_run", "") == "" and _counts_stack(s.labels, resources)):
            key = f"{s.labels['verb']} {s.labels['resource']}" + (
                f"/{s.labels['subresource']}" if s.labels.get("subresource") else "")
            counts[key] = counts.get(key, 0) + int(s.value)
    return counts


def stack_reads(samples: list[Sample], resources: frozenset[str]) -> int:
    """Server-side non-watch reads (GET, LIST) of the stack's resources, by every client."""
    return int(sum(s.value for s in samples if s.name == "apiserver_request_total"
                   and s.labels.get("verb") in ("GET", "LIST") and _counts_stack(s.labels, resources)))


def open_watches(samples: list[Sample], resources: frozenset[str]) -> dict[str, int]:
    """Watches open right now on the stack's resources and KfDefs, by resource (every client)."""
    counts = {}
    for s in samples:
        if (s.name == "apiserver_longrunning_requests" and s.labels.get("verb") == "WATCH"
                and s.value and _counts_stack(s.labels, resources)):
            counts[s.labels["resource"]] = counts.get(s.labels["resource"], 0) + int(s.value)
    return counts


def difference(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    """``after - before`` per key, zero entries dropped."""
    keys = set(after) | set(before)
    return {k: after.get(k, 0) - before.get(k, 0) for k in sorted(keys) if after.get(k, 0) != before.get(k, 0)}


#: The operator's clients, as their user agents start: its own (``KubeClient``) and kopf's.
OPERATOR_AGENTS = ("kfdef-operator/", "kopf/")
#: Writes not counted: Leases (kube-controller-manager's and kube-scheduler's leader election, node heartbeats; the
#: operator runs without leader election here). Events are counted.
_NOT_COUNTED_RESOURCES = frozenset({"leases"})
#: What the operator writes besides the stacks' own objects.
_NOT_STACK_RESOURCES = frozenset({"kfdefs", "events", "leases"})


def process_cpu_s(pid: int) -> tuple[float, float]:
    """CPU seconds (user and system) of a process itself, and of its children: those it waited for and those still
    running with all they started (the operator's render fork server, its renders and their kustomize runs)."""
    fields = _stat_cpu(pid)
    children = fields[2] + fields[3]
    for child in _live_descendants(pid):
        try:
            children += sum(_stat_cpu(child))
        except OSError:
            pass  # exited meanwhile: its time moved into its parent's children fields
    tick = os.sysconf("SC_CLK_TCK")
    return (fields[0] + fields[1]) / tick, children / tick


def _stat_cpu(pid: int) -> list[int]:
    """utime, stime, cutime and cstime of ``/proc/<pid>/stat``, in clock ticks."""
    return [int(x) for x in Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[11:15]]


def _live_descendants(pid: int) -> list[int]:
    found, pending = [], [pid]
    while pending:
        parent = pending.pop()
        for task in Path(f"/proc/{parent}/task").glob("*"):
            try:
                children = [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                continue
            found += children
            pending += children
    return found


def audit_offset(control_plane: ControlPlane) -> int:
    """Where the audit log ends now: :func:`writes_by_client` counts what is written after it."""
    try:
        return control_plane.audit_log.stat().st_size
    except FileNotFoundError:
        return 0


def _audit_events(control_plane: ControlPlane, since: int) -> list[dict]:
    """The audit log's events after byte ``since`` (a line still being written is left out)."""
    try:
        with control_plane.audit_log.open("rb") as log:
            log.seek(since)
            lines = log.read().splitlines()
    except FileNotFoundError:
        return []
    events = []
    for line in lines:
        try:
            events.append(json.loads(line))
        except ValueError:
            continue
    return events


def _is_operators(event: dict) -> bool:
    return event.get("userAgent", "").startswith(OPERATOR_AGENTS)


def writes_by_client(control_plane: ControlPlane, since: int) -> dict[str, dict[str, int]]:
    """Write requests in the audit log after byte ``since`` (dry runs and Leases excluded), per client and
    ``"VERB resource"``. The client is ``operator`` for the operator's own requests and kopf's (by user agent),
    else the user agent's product (``kube-controller-manager``, ``kwok``, ...)."""
    counts: dict[str, dict[str, int]] = {}
    for event in _audit_events(control_plane, since):
        target = event.get("objectRef") or {}
        resource = target.get("resource", "")
        if "dryRun=" in event.get("requestURI", "") or resource in _NOT_COUNTED_RESOURCES:
            continue
        client = "operator" if _is_operators(event) else event.get("userAgent", "").split("/")[0] or "unknown"
        key = f"{event.get('verb', '').upper()} {resource}" + (
            f"/{target['subresource']}" if target.get("subresource") else "")
        per_client = counts.setdefault(client, {})
        per_client[key] = per_client.get(key, 0) + 1
    return counts


def _unix_time(stamp: str) -> float:
    return datetime.fromisoformat(stamp).timestamp()


def stack_writes_span(control_plane: ControlPlane, since: int, until: float) -> tuple[float, float] | None:
    """When the operator's writes of stack objects began and ended (Unix times: the first request received, the
    last response sent), among those in the audit log after byte ``since`` received before ``until``; None when
    there were none. A stack object is anything but KfDefs, Events and Leases, written as itself (no
    subresource); dry runs do not count."""
    spans = [(_unix_time(event["requestReceivedTimestamp"]), _unix_time(event["stageTimestamp"]))
             for event in _audit_events(control_plane, since)
             if _is_operators(event) and "dryRun=" not in event.get("requestURI", "")
             and (event.get("objectRef") or {}).get("resource", "") not in _NOT_STACK_RESOURCES
             and not (event.get("objectRef") or {}).get("subresource")]
    spans = [span for span in spans if span[0] <= until]
    if not spans:
        return None
    return min(begin for begin, _ in spans), max(end for _, end in spans)
