"""The sections on what was measured apart from the session, each on its own control plane, with its date and
method: their figures are written here, not read from the results (the findings of issue 18 quote the session's
CPU figures)."""

from __future__ import annotations

from ..results import Results
from ..tables import table
from .apply import floor_cores


def apply_phase_waits() -> list[str]:
    """What the v1.11.0 apply phase waits for: kube-apiserver establishing CRDs (issue 26)."""
    return [
        "## What the v1.11.0 apply phase waits for (issue 26)",
        "",
        "Measured apart from the runs above (2026-11-28, this machine), from kube-apiserver's audit log and CPU "
        "profiles (`/debug/pprof/profile`) on one control plane, the operator's apply of v1.11.0 beside the floor's:",
        "",
        "- **kube-apiserver makes new CRDs Established one after another, in the order they were created.** It "
        "sets `NamesAccepted`, then `Established`, on each: 146 status writes of CRDs of about 200 KiB. In the "
        "floor's apply they took 6.4 s (1.2 to 7.6 s after its first write, 47 ms each). In the operator's, whose "
        "first write came 6.0 s after the KfDef was created (the render), they took 8.9 s (7.35 to 16.23 s after the "
        "create, 61 ms each, beside the rest of the apply), and the apply waited for all 70 CRDs: its last write, "
        "the admission objects, was answered at 16.27 s. The floor waits for no CRD but those its custom resources "
        "need.",
        "- **Sending every CRD sooner did not move that end.** With all 70 sent at once alongside the first stage, "
        "every CRD had arrived 7.0 s after the create instead of 7.9 s, and the last was still Established 9.2 s "
        "later: 4 operator applies took 15.9 to 16.5 s against 15.7 to 16.8 s before. Not kept.",
        "- **What moved it: the CRDs of kinds the set has objects of go first, the others after them, not waited "
        "for** (their `Established` counts towards `Ready`, as a Deployment's availability does). kube-apiserver "
        "then establishes the CRDs the custom resources need before the others, and the apply ends with its last "
        "object. A/B on this machine, a fresh control plane per session, 6 applies of v1.11.0 each: 16.1 -> 12.4 s "
        "(medians), the apply phase 10.45 -> 6.47 s.",
        "- **The operator's watches cost kube-apiserver nothing measurable.** Floor applies of v1.11.0 with and "
        "without a cluster-wide JSON watch of each of its 20 built-in kinds (CRDs included), interleaved, 4 each: "
        "8.47 and 8.32 s (medians), kube-apiserver 12.0 CPU-s both. Kind by kind, the operator writes what the floor "
        "writes (the floor adds some 1,500 retries of custom resources whose kind is not served yet).",
        "- **In the CPU profiles** kube-apiserver used 15.3 CPU-s during the operator's 17 s (render included) "
        "against 13.1 during the floor's 9 s; of the difference, 0.7 s went to encoding watch events (the "
        "operator's watch of CRDs receives each CRD status write whole) and 0.7 s to serving lists.",
    ]


def heal_tail() -> list[str]:
    """Where the heal tail came from, and what moved it (issue 26)."""
    return [
        "## Where the heal tail came from (issue 26)",
        "",
        "Measured apart from the runs above (2026-11-29, this machine), with `python -m bench.memory --rounds 0` on "
        "a fresh control plane per session, kube-apiserver's audit log, and the times at which the operator read "
        "each DELETED event and sent its POST:",
        "",
        "- **The operator's own part of a heal is about a millisecond.** Its watch read the DELETED event a median "
        "1 ms after the benchmark's DELETE returned and the POST left 0.2 ms later. kube-apiserver received the "
        "operator's create 3.4 ms (median; p99 10.1) after it had answered the delete and answered it 3.1 ms later; "
        "the floor's create 2.5 ms (p99 6.0) after, answered 2.8 ms later.",
        "- **A 50 ms pause between trials made each heal share the cluster with the last one's cascade:** the new "
        "Deployment's ReplicaSet, Pod, binding, status updates, Endpoints and EndpointSlices, some 30 writes over "
        "100 ms. Two sessions back to back, 50 heals each: with the pause, p99 55.3 ms (floor 50.7); with 1 s "
        "instead, 13.8 ms (floor 9.8). A trial now starts once the last healed Deployment is available again (and "
        "the KfDef reports every object ready), a condition rather than a pause.",
        "- **The measuring process's garbage collector was once counted as a heal:** the operator's create was "
        "answered 15 ms after the delete, and the benchmark read it at 68.6 ms, at the end of a 60.7 ms collection "
        "of its own heap. The collector is now held off while a heal is timed.",
        "- **With 50 heals the nearest-rank p99 is the slowest heal**; 100 make it the second slowest.",
        "- **Paced so, 3 sessions of 100 heals:** operator p99 18.0, 27.6, 20.3 ms (p50 7.2, 7.8, 7.0); floor "
        "p99 13.9, 17.3, 16.7 ms (p50 5.6, 5.4, 5.2). In the operator's slowest heals the POST reached "
        "kube-apiserver 3 to 10 ms after it was sent: the 2 cores were busy more than half the time (over 26.5 s of "
        "heals kube-apiserver used 16.5 CPU-s, kube-controller-manager 4.6, etcd 3.9, kwok 1.3, kube-scheduler 1.2, "
        "the operator 1.35).",
        "- **Not the connection pool, nor a collector:** in a fourth session (p99 17.0 ms, floor 10.0) the operator "
        "opened no new connection while its heals were timed (aiohttp's connection set-up logged: a new TLS "
        "connection costs 5 to 15 ms here), and no process had a collection of over 0.5 ms within 30 ms of any of "
        "its three slowest heals. Every loop step of the operator's heals, logged with its wall and CPU time over "
        "100 heals: p50 0.1 ms, p98 1.4 ms, at most 6.7 ms of wall for 0.3 ms of CPU: when a step is slow, the "
        "process was waiting for a core, not working.",
        "- **Sessions of 100 heals with this code (2026-11-29):** the full runs at c74e830 and a434989, operator "
        "p99 13.5 and 15.4 ms (floor 16.3 and 13.4); seven sessions of `bench.memory` alone, its heals right after "
        "the deploy and the no-op restart, 20.3 to 26.7 ms (median 22.4; floor 10.9 to 25.6, median 18.2; p50 6.1 "
        "to 7.7 against 4.1 to 5.3), and one more with connection logging, 17.0 (floor 10.0); three with 30 s of "
        "rest before the heals, 22.0, 16.2 and 19.8 ms (floor 13.3, 13.1, 9.7). The floor itself went over 20 ms "
        "in 3 of the 13 sessions: one run of 100 heals lands on either side of the target.",
        "- **The operator's own status writes made a fifth of kube-apiserver's garbage during the heals.** A heal "
        "changes readiness, so the KfDef's status is written (some 35 times per 100 heals, the status refresher "
        "coalescing), and kube-apiserver decodes, prunes, validates and re-encodes the whole KfDef each time: 52 KB, "
        "most of it the inventory of 595 objects, then an object per entry. kube-apiserver's allocation profile "
        "(`/debug/pprof/allocs`, before and after 100 heals and their floor's): 3.04 GB allocated, 627 MB of it by "
        "KfDef status writes, 352 MB decoding etcd's watch events; its CPU profile over 12 s of those heals: 8.6 "
        "CPU-s, 1.40 of it in the collector's mark workers, 0.53 in KfDef status writes. With the inventory as "
        "strings (see the status write section: 12.4 ms of CPU per write instead of 42.7): 2.15 GB, 124 MB and "
        "93 MB; 6.8 CPU-s, 0.96 and 0.09. With 2 cores, kube-apiserver's collector is what the slowest heals "
        "met (`GODEBUG=gctrace=1`, one session): its mark phases (0.3 to 0.6 s each, about every second, "
        "some 0.3 CPU-s each) overlapped 24 % of the heals, and the two slowest of the operator's and three of the "
        "four slowest of the floor's.",
        "- **A/B of the inventory format, 4 sessions each, interleaved (2026-11-29):** strings p99 22.1, 15.0, 22.7, "
        "19.7 ms, objects 26.1, 26.3, 20.3, 23.9 ms; the 400 heals of each pooled: p99 22.1 against 26.1 ms, 7 "
        "heals over 20 ms against 11 (the floor's pooled p99 17.6 and 16.6 ms, 3 and 4 over 20 ms). Kept. The full "
        "run at f27c9d7 that followed: p99 23.0 ms, 4 heals over 20 ms (floor 13.9 ms, none).",
        "- **The status write of one heal landed in a later heal (2026-11-29).** The operator writes a heal's "
        "status once its refresher's coalescing window (0.2 s) has passed since the heal's first event. Trials "
        "started some 50 ms apart (the last healed Deployment available, the KfDef's latest status whole: still "
        "the one before the heal, that write not yet due), so the write met kube-apiserver during the heal two "
        "trials later, at 10 to 12 ms of its CPU on 2 cores. In one session's audit log 4 of the operator's heals "
        "overlapped a KfDef status write, the two slowest among them (24.1 and 17.1 ms), and 4 of the floor's. "
        "A trial now also starts no sooner than `TRIAL_SPACING_S` (0.3 s: that window and 0.1 s) after the last "
        "delete. A/B, 3 interleaved sessions of 100 heals each: operator p99 25.4, 19.7, 23.0 ms before, 18.1, "
        "13.2, 13.5 after (floor 12.0, 19.0, 13.8 before, 7.1, 11.0, 8.4 after); the 300 heals of each pooled: "
        "p99 25.0 against 13.8 ms, 6 heals over 20 ms against none (floor 15.6 against 9.7). A fourth session "
        "with the spacing: p99 13.1 ms (floor 8.4), 10 KfDef status writes in the whole session (55 before), "
        "none overlapping a heal. The full run at 98233ef that followed: p99 11.9 ms (p50 6.48; floor 12.4 and "
        "4.89), no heal over 20 ms.",
        "- **Tried and not kept, no difference beyond that spread:** aiohttp handing out the most recently used "
        "idle connection instead of the oldest (p99 median 20.2 ms over 6 sessions against 22.4 over 7), and the "
        "heal's Event posted 50 ms after the heal instead of at once (p99 median 20.1 ms over 4 sessions; p50 "
        "6.25 against 6.7).",
        "- **Tried and not kept: a full collection and `gc.freeze()` at the end of each reconcile,** so that the "
        "operator's automatic full collections (8 to 14 ms at rest with the synthetic stack, up to 37 ms during its "
        "apply, the event loop stopped meanwhile) would walk only what was allocated since. Over 100 heals no "
        "automatic full pass of more than 1.5 ms was left (one of 8 ms before), but the heal p99 did not move beyond "
        "the cluster's noise (22.2 ms with it, 20.6 without, one session each), and with 300 KfDefs on one operator "
        "(`bench.ha`'s unsharded run) a full collection after every reconcile starved the event loop: the leader "
        "lease was lost 4 times in 3 minutes (renew deadline 10 s) and the run had not ended after 11 minutes, "
        "where it takes 1.",
    ]


def render_helper() -> list[str]:
    """The render before and after the render helper (issue 23)."""
    return [
        "## The render before and after the render helper (issue 23)",
        "",
        "Measured apart from the runs above (they predate it), on Kubeflow v1.11.0's `example/` (653 objects), the "
        "medians of 5 interleaved runs on this machine, each run checking that both give the same objects: the "
        "operator renders through `kfdef-render` (kustomize's own API on a confined filesystem, answering JSON) "
        "where it ran the pinned `kustomize build` and parsed its YAML.",
        "",
        *table(["render of v1.11.0 `example/`", "build", "reading its output", "whole"], [
            ["before: `kustomize build` (9.8 MB of YAML, libyaml)", "7.54 s", "3.00 s", "10.5 s"],
            ["after: `kfdef-render build` (4.7 MB of JSON)", "5.88 s", "0.17 s", "6.05 s (0.58 x)"]]),
    ]


def findings_of_issue_18(results: Results) -> list[str]:
    """What issue 18's benchmarks found and what changed for it."""
    return [
        "## Findings of issue 18",
        "",
        "- **The CRD that took over 60 s to go** (`customresourcecleanup.apiextensions.k8s.io`) had two causes. "
        "(1) kube-apiserver deletes a CRD only after every object of its kind is gone; its finalizer deletes the "
        "remaining objects, then re-checks every 5 s. One object with a finalizer whose controller is gone holds the "
        "CRD for ever, and the teardown deleted the controllers (the Deployments) before the CRDs: it now deletes "
        "the CRDs right after the custom resources, while the controllers run. (2) A CRD deleted seconds after its "
        "creation: the finalizer's cleanup fails (`could not list instances: storage is (re)initializing`) and "
        "its immediate retry can read a cached copy one version behind, take the conflict for someone else's change "
        "and drop the CRD; the change it then sees differs only in the `Terminating` condition, which it ignores, "
        "so the CRD stays until the informer's resync, 5 minutes later (k8s.io/apiextensions-apiserver v0.36.4, "
        "`pkg/controller/finalizer`). A benchmark run saw it: 16 of 22 CRDs deleted by the kubectl baseline failed "
        "once, one of them stayed 4.5 minutes. The teardown now touches such a CRD after 2 s (an annotation of the "
        "operator's, which queues it again), and so do the benchmark's own deletions. The profiler also gave up "
        "after one run of the teardown, where the operator retries with its delays: it now runs the teardown again "
        "until the KfDef is gone. (It also raced a standby preparation rendering into the same directory, since "
        "fixed.)",
        "- **The teardown waited for the Namespaces' fixed delay after everything else**: kube-controller-manager "
        "starts to empty a deleted namespace only 5 s after its deletion (`namespaceDeletionGracePeriod`), and the "
        "last wave sent the Namespaces' deletes last, after some 480 others, each preceded by a GET (a CRD's GET "
        "returned its whole schema). The Namespaces now go first in that wave, an object the watch cache shows as "
        "the stack's is deleted without a GET (uid and resourceVersion preconditions guard against a stale cache), "
        "and the waits wake on watch events instead of polling every 0.5 s. The operator cannot overlap the CRDs' "
        "wave with the Namespaces' delay as the floor does: the Namespaces hold the controllers that custom "
        "resources may still need.",
        "- **The no-op restart's writes were other clients' Events**: kube-apiserver's audit log tells clients "
        "apart by user agent; the operator wrote nothing on restart or at rest, the Events came from cluster "
        "components (`noop.writes`, `idle.writes`). The write targets now count the operator's writes.",
        "- **Where the CPU goes**: the benchmarks read every process's CPU time per path (*Where the time and the "
        f"CPU go*): the floor's apply alone keeps {floor_cores(results)} of the "
        f"{results.meta.machine.cores} cores busy, so the operator's render (kustomize, then the YAML it prints "
        "parsed) cannot hide behind kube-apiserver's work; for v1.11.0 the CPU alone ruled out issue 18's 1.15 x "
        "and 0.35 x targets, which left the render out of the floor and of kubectl's figure (issue 26 counts "
        "kustomize alone in both).",
        "- **Ten times the workload never finished before**: the operator's watches (one per kind; 114 at 10x) "
        "shared the requests' connection pool of 64, so every request waited for a connection until it timed out "
        "and the status was never written (`StatusNotWritten` once a minute). Watches now have a pool of their own.",
        "- **Lookups of custom resources right after their CRD was created** waited 1 s each: kube-apiserver answers "
        "429 (`storage is (re)initializing`) with `Retry-After: 1`. A kind whose CRD the apply itself created has no "
        "objects, so its objects are no longer looked up.",
        "- **The heal's tail was the garbage collector**: a stack's desired state was kept as dicts (v1.11.0: 22 MiB, "
        "35,000 containers), and each full collection of the process walked them with every module's objects, 30 "
        "to 40 ms during which no heal ran. Desired states are now kept as compact JSON, decoded per read, and the "
        "objects of the operator's start are frozen out of the collector's passes. Heal p99 was 80.7 ms before; "
        "in two full runs after, 34.9 and 56.0 ms (p50 7.56 and 17.7 ms: everything in the second run was slower, "
        "kubectl's apply included), so one slow heal in 50 still decides the p99 on these 2 shared cores.",
        "- **kopf streamed every CRD of the cluster** to notice kinds it might serve, decoding each in full on every "
        "change (70 in v1.11.0, hundreds of KiB each; 14.7 MiB of them held at rest) and re-reading discovery for "
        "its group. It serves the KfDef CRD alone, and now watches only that one (a field selector): RSS with "
        "v1.11.0 at rest 177 -> 155 MiB in a probe of the release alone.",
        "- **kustomize spends much of its CPU in Go's garbage collector** on v1.11.0's `example/`: it runs with "
        "`GOGC=400` and `GOMEMLIMIT=256MiB`, 0.9 x the build time at the same peak memory (about 275 MiB). These "
        "benchmarks ran with the soft limit at 512 MiB (0.83 x the render time, median of 4), which held 500 MiB: "
        "more than deploy/'s 512 MiB container has beside the operator, so the shipped setting trades that speed "
        "for memory.",
    ]
