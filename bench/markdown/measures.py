"""What each figure of the session measures, with the details the session recorded beside its figures."""

from __future__ import annotations

from ..results import Results


def measures(results: Results) -> list[str]:
    noop, idle = results.noop, results.idle
    return [
        "## What each figure measures",
        "",
        "- `apply.operator_s`: from the KfDef create call returning until the KfDef's status reports every object "
        "applied (`summary.applied == summary.total`, `Reconciling=False`), seen on a watch. Includes fetching the "
        "tarball over HTTP and rendering with kustomize. `apply.operator_ready_s`: until `Ready=True` (Deployments "
        "Available).",
        "- `apply.kubectl_ssa_s`: `kubectl apply --server-side --force-conflicts -f rendered.yaml` (custom resources "
        "fail), `kubectl wait --for condition=established crd -l <run label>`, the same apply again. Rendering "
        "(`render.s`, `kfdef-operator build`) is not included.",
        "- `apply.floor_s`: every rendered object server-side applied at once "
        f"({results.synthetic.floor_concurrency}"
        " in flight) through the operator's own client, 404s (namespace or CRD not there yet) retried every 20 ms; "
        "no stages, no waits.",
        "- `apply.render_floor_s`, `release.apply.render_floor_s`: the pinned kustomize CLI (`kustomize build`, the "
        "version the render helper embeds) building the trees the operator's render builds for the same KfDef, one "
        "per application, as many at a time as the operator renders applications, output discarded: the least a tool "
        "rendering with kustomize needs before its first object. The trees come from the operator's own render "
        "run in the benchmark (`bench/baselines.py`), timed apart; no operator runs meanwhile. Measured in each "
        "round beside the floor.",
        "- `apply.apply_phase_s`, `release.apply.apply_phase_s`: the operator's first apply from its first write of "
        "a stack object (request received) to its last one answered, read from kube-apiserver's audit log (the "
        "operator's user agents; KfDefs, Events, Leases, subresources and dry runs aside; writes received before "
        "the status said every object was applied). The `apply` step of `apply.steps` also holds the reads before "
        "the first write and the status write after the last.",
        "- `noop.*`: the operator restarted with the stack deployed. `noop.s`: from the new process answering "
        "`/readyz` until its resume reconcile succeeded (`kfdef_reconcile_duration_seconds_count{result=\"success\"}`);"
        " `noop.restart_s` includes the process start; `noop.reconcile_s` is the reconcile's own duration. "
        "`noop.writes` counts the operator's write requests of any resource (its own client's and kopf's, told "
        "apart by user agent in kube-apiserver's audit log; dry runs and Leases aside) over the restart and 2 s "
        f"after; its own client counted {noop.operator_client} writes. Other clients wrote "
        f"{noop.others} in the same windows (the stacks' objects, KfDefs and Events by anyone, from "
        f"`apiserver_request_total`: {noop.server_stack_writes}).",
        "- `apply.steps`, `release.apply.steps`: the first arrival, on the watch of KfDefs, of each `Reconciling` "
        "reason the operator writes (`FetchingSources`, `Rendering`, `Applying`), between the create call "
        "returning and every object applied.",
        "- `cpu`, `release.cpu`: user and system CPU seconds (`/proc/<pid>/stat`) of etcd, kube-apiserver, "
        "kube-controller-manager, kube-scheduler, kwok and the operator (with the render processes and kustomize "
        "runs it waited for), read before and after each apply and teardown; kubectl's own process is not counted.",
        "- `heal.*`: see `bench/heal.py`; Deployment heals measured on a watch "
        f"({results.heal.resolution}). `heal.floor_*`: the heal floor, the same measurement of copies of "
        "the same Deployments (a label of their own in their selector) that a watch in the measuring process puts "
        "back with one POST as soon as their DELETED event is read, each trial right after one of the operator's. "
        "A trial starts once the last one's Deployment is available again (after the operator's, once its KfDef "
        "reports every object ready too), so that each heal shares the cluster with its own delete's cascade only; "
        "the measuring process's garbage collector is held off while a heal is timed. p99 is nearest-rank: of 100 "
        "heals, the second slowest.",
        "- `teardown.s`: from the KfDef delete call returning until the KfDef is gone and no object of any kind in "
        "the workload carries its instance label (cluster-scoped ones included).",
        "- `teardown.floor_s`: every object of the workload deleted at once (48 in flight, background propagation) "
        "through the operator's client, until each object deleted is gone (GET polled every 50 ms; an aggregated "
        "ClusterRole that kube-controller-manager re-creates counts as gone once the one deleted is).",
        "- `release.noop.writes`, `idle.*`, `idle.writes`: the v1.11.0 release and a synthetic stack deployed "
        "together, the operator restarted (its resume reconcile of both is the no-op), then left at rest. "
        "`release.rss_mb`: the operator's VmRSS 5 s after the release alone was Ready (first apply). "
        f"`idle.writes` counts the operator's writes (audit log, as for `noop.writes`): "
        f"{idle.writes_by_request or 'none'}; its own client sent "
        f"{sum(idle.requests_by_verb.values())} requests at rest. Other clients "
        f"wrote {idle.writes_others or 'nothing'} (Events of the release's simulated pods, and "
        "the cluster components' own objects).",
        f"- `idle.*`: operator at rest with both stacks deployed, over {idle.window_s:.0f} s: its own requests by "
        f"verb {idle.requests_by_verb or '{}'} (watches are not requests here); all clients' reads of the stack's "
        f"resources on the server: {idle.server_reads_per_min_all_clients:.1f}/min. Open watches of the operator "
        f"(server gauge, operator up minus down): {idle.watches} "
        f"({', '.join(f'{k}: {v}' for k, v in idle.watches_by_resource.items())}).",
        "- `upgrade.*` (*Day 2*, `bench/upgrade.py`): `upgrade.applied_s` from the answer to the edit of a Ready "
        "v1.2.0 KfDef until its status says the new generation's first apply is done (`Reconciling=False` and "
        "`observedGeneration` for it, whatever failed), `upgrade.ready_s` until `Ready=True` for it, both seen on "
        "the watch of KfDefs; `upgrade.teardown_s` from the delete call returning until v1.2.0's KfDef is gone; "
        "`upgrade.fresh_applied_s` and `upgrade.fresh_ready_s` as `release.apply.operator_s` and "
        "`release.apply.operator_ready_s`. `upgrade.writes`: the operator's writes (audit log, as for `noop.writes`) "
        "from the edit until Ready; `upgrade.replacement_writes`: from before the delete until the fresh KfDef was "
        "Ready.",
    ]
