"""``kfdef-operator status``: a stack as a tree, for the person on call.

The KfDef, its applications and their objects, each line with its health and, where it matters, why: failed to
apply, not ready (a blocking webhook of the stack named), missing, healed N times, held by another manager, opted
out. Failures come first; the healthy rest of an application is one line of counts. Everything comes from the
KfDef's status and inventory (each entry names its application), the Events on the KfDef (heals) and live reads of
the stack's objects, so it works without the operator running. Like ``kubectl rollout status`` for scripts: exit 0
when every KfDef shown is Ready for its current generation, 1 when not, 2 on errors; ``--watch`` prints the tree
again whenever it changes and ends once Ready (or at ``--timeout``).

The reading (:func:`read_stack`) is the only I/O; :func:`assess`, :func:`render_tree` and :func:`as_json` are
pure, from the dicts the API server returns.
"""

from __future__ import annotations

import argparse
import asyncio
import enum
import json
import re
import sys
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TextIO

from kfdef_operator.api.kfdef import parse_duration
from kfdef_operator.api.names import GROUP, KIND, PLURAL, RECONCILE_ANNOTATION, VERSION, kfdef_path
from kfdef_operator.api.types import JSON
from kfdef_operator.cli.errors import EXIT_BAD_INPUT, EXIT_NOT_READY, EXIT_OK, BadInput, Failed
from kfdef_operator.controller import preflight
from kfdef_operator.runtime import inventory
from kfdef_operator.runtime.ownership import Owner, opted_out
from kfdef_operator.ssa.claims import Claim
from kfdef_operator.ssa.client import KubeApiError, KubeClient, describe_api_error
from kfdef_operator.ssa.discovery import Discovery, UnknownKind
from kfdef_operator.ssa.health import assess as assess_health
from kfdef_operator.ssa.inventory import ObjectRef, ref_of
from kfdef_operator.ssa.webhooks import BLOCKED_BY_OWN_WEBHOOK, explain, webhooks_of

WATCH_POLL_S = 2.0
#: The end of a heal Event's message: ``... <Kind[.group]> <[namespace/]name> (<cause>) in <n> ms``
#: (runtime/heal.py; kinds and names hold no space).
_HEALED = re.compile(r"(?P<object>\S+ \S+) \([^)]*\) in \d+ ms$")
#: How a conflict starts in ``status.failures`` (ssa/manager.py, runtime/heal.py).
_HELD_BY_ANOTHER = ("already managed by ", "deleted, then created again by someone else")
#: Lines for objects of no application the status names (refused before they entered the inventory).
OTHER = "(other objects)"


class Health(enum.Enum):
    """An object's health as shown, worst first (the tree's order)."""

    FAILED = "failed"              # the last apply or heal was refused
    HELD = "held"                  # another KfDef or owner holds it
    BLOCKED = "blocked"            # not ready because the stack's own webhook cannot be called
    NOT_READY = "not-ready"
    MISSING = "missing"
    UNKNOWN = "unknown"            # could not be read
    OPTED_OUT = "opted-out"
    HEALED = "healed"              # healthy, but healed lately
    HEALTHY = "healthy"

    @property
    def needs_a_line(self) -> bool:
        return self is not Health.HEALTHY


MARKS = {Health.FAILED: "✗", Health.HELD: "!", Health.BLOCKED: "✗", Health.NOT_READY: "…", Health.MISSING: "?",
         Health.UNKNOWN: "?", Health.OPTED_OUT: "-", Health.HEALED: "~", Health.HEALTHY: "✓"}
_ORDER = list(Health)


@dataclass(frozen=True)
class ObjectStatus:
    ref: str
    kind: str
    health: Health
    why: str = ""


@dataclass
class ApplicationStatus:
    name: str
    objects: list[ObjectStatus] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        counted = Counter(o.health.value for o in self.objects)
        return {h.value: counted[h.value] for h in Health if counted[h.value]}


@dataclass
class StackStatus:
    """One KfDef as the tree shows it."""

    namespace: str
    name: str
    ready: bool
    summary: str                        # the Ready condition's reason and message, or why there is none
    conditions: list[JSON]
    applications: list[ApplicationStatus]
    warnings: list[str]
    deleting: bool = False


@dataclass
class Observed:
    """What was read for one KfDef: the KfDef, its stack's live objects by ref (None: not found; absent: not
    read) and the Events posted on it."""

    kfdef: JSON
    live: dict[ObjectRef, JSON | None] = field(default_factory=dict)
    unreadable: dict[ObjectRef, str] = field(default_factory=dict)
    events: list[JSON] = field(default_factory=list)


# -- pure -----------------------------------------------------------------------------------------------------------

def heals_by_object(events: Iterable[JSON]) -> dict[str, int]:
    """How often each object was healed, from the ``Healed`` Events (repeats counted; Events live an hour)."""
    healed: Counter[str] = Counter()
    for event in events:
        matched = _HEALED.search(event.get("message") or "") if event.get("reason") == "Healed" else None
        if matched:
            healed[matched["object"]] += int(event.get("count") or 1)
    return dict(healed)


def _condition(status: JSON, type_: str) -> JSON:
    return next((c for c in status.get("conditions") or [] if c.get("type") == type_), {})


def is_ready(kfdef: JSON) -> bool:
    """Ready=True for the KfDef's current generation (an older generation's Ready does not count)."""
    status = kfdef.get("status") or {}
    generation = (kfdef.get("metadata") or {}).get("generation")
    return (_condition(status, "Ready").get("status") == "True" and status.get("observedGeneration") == generation
            and not (kfdef.get("metadata") or {}).get("deletionTimestamp"))


def _object_status(ref: ObjectRef, owner: Owner, observed: Observed, failures: Mapping[str, str],
                   heals: Mapping[str, int], webhooks: Mapping[str, object]) -> ObjectStatus:
    name = str(ref)
    healed = heals.get(name, 0)
    healed_note = f"healed {healed} time{'s' * (healed != 1)} in the last hour" if healed else ""
    if name in failures:
        return _failure(name, ref.kind, failures[name], healed_note)
    if ref in observed.unreadable:
        return ObjectStatus(name, ref.kind, Health.UNKNOWN, f"could not be read: {observed.unreadable[ref]}")
    if ref not in observed.live:
        return ObjectStatus(name, ref.kind, Health.UNKNOWN, "not read")
    live = observed.live[ref]
    if live is None:
        return ObjectStatus(name, ref.kind, Health.MISSING, _joined("does not exist (the operator re-creates it)",
                                                                   healed_note))
    meta = live.get("metadata") or {}
    if opted_out(meta):
        return ObjectStatus(name, ref.kind, Health.OPTED_OUT,
                            f"opted out ({RECONCILE_ANNOTATION}=disabled): left to whoever set it")
    if owner.claim(meta) is Claim.FOREIGN:
        return ObjectStatus(name, ref.kind, Health.HELD, f"held by {owner.holder(meta)}")
    health = assess_health(live)
    if not health.ready:
        why = explain(health.message, webhooks)  # type: ignore[arg-type]
        blocked = BLOCKED_BY_OWN_WEBHOOK in why
        return ObjectStatus(name, ref.kind, Health.BLOCKED if blocked else Health.NOT_READY,
                            _joined(f"not ready: {why}" if why else "not ready", healed_note))
    if healed:
        return ObjectStatus(name, ref.kind, Health.HEALED, healed_note)
    return ObjectStatus(name, ref.kind, Health.HEALTHY)


def _failure(name: str, kind: str, message: str, healed_note: str = "") -> ObjectStatus:
    """A failure of ``status.failures``: a conflict (the manager's and the healer's words) is another's hold."""
    if message.startswith(_HELD_BY_ANOTHER):
        return ObjectStatus(name, kind, Health.HELD, _joined(message, healed_note))
    return ObjectStatus(name, kind, Health.FAILED, _joined(f"failed to apply: {message}", healed_note))


def _joined(*parts: str) -> str:
    return "; ".join(part for part in parts if part)


def assess(observed: Observed) -> StackStatus:
    """The tree of one KfDef from what was read (pure)."""
    kfdef = observed.kfdef
    meta, status = kfdef.get("metadata") or {}, kfdef.get("status") or {}
    owner = Owner(meta.get("name", ""), meta.get("namespace", ""), meta.get("uid", ""))
    names = [row.get("name", "") for row in status.get("applications") or []]
    failures = {f.get("object", ""): f.get("message", "") for f in status.get("failures") or []}
    failed_in = {f.get("object", ""): f.get("application") or OTHER for f in status.get("failures") or []}
    heals = heals_by_object(observed.events)
    webhooks = webhooks_of(live for live in observed.live.values() if live is not None)
    applications = {name: ApplicationStatus(name) for name in names}
    seen = set()
    for ref, _, rendered_by in inventory.read(status):
        seen.add(str(ref))
        applications.setdefault(rendered_by or OTHER, ApplicationStatus(rendered_by or OTHER)).objects.append(
            _object_status(ref, owner, observed, failures, heals, webhooks))
    for name, message in failures.items():  # refused before entering the inventory: conflicts, first refusals
        if name not in seen:
            applications.setdefault(failed_in[name], ApplicationStatus(failed_in[name])).objects.append(
                _failure(name, name.split(" ", 1)[0].split(".", 1)[0], message))
    for application in applications.values():
        application.objects.sort(key=lambda o: (_ORDER.index(o.health), o.ref))
    ready = _condition(status, "Ready")
    if not status:
        summary = "no status yet: is the operator running? (kfdef-operator run, or its Deployment)"
    elif status.get("observedGeneration") != meta.get("generation"):
        summary = (f"generation {meta.get('generation')} not observed yet (status is of generation "
                   f"{status.get('observedGeneration')}): is the operator running?")
    else:
        summary = f"{ready.get('reason', '')}: {ready.get('message', '')}".strip(": ")
    return StackStatus(owner.namespace, owner.name, is_ready(kfdef), summary, list(status.get("conditions") or []),
                       sorted(applications.values(), key=lambda a: (not _troubled(a), _position(names, a.name))),
                       list(status.get("warnings") or []), bool(meta.get("deletionTimestamp")))


def _troubled(application: ApplicationStatus) -> bool:
    return any(o.health not in (Health.HEALTHY, Health.HEALED, Health.OPTED_OUT) for o in application.objects)


def _position(names: list[str], name: str) -> int:
    return names.index(name) if name in names else len(names)


def _count_line(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{n} {health.replace('-', ' ')}" for health, n in counts.items()) or "no objects"


def render_tree(stack: StackStatus) -> str:
    """The tree as text: the KfDef, its conditions, each application with its troubled objects, counts for the
    healthy rest, then the warnings."""
    state = "Terminating" if stack.deleting else ("Ready" if stack.ready else "NOT READY")
    lines = [f"KfDef {stack.namespace}/{stack.name}: {state}: {stack.summary}"]
    for condition in stack.conditions:
        if condition.get("type") != "Ready":
            lines.append(f"  {condition.get('type')}={condition.get('status')} {condition.get('reason', '')}"
                         + (f": {condition['message']}" if condition.get("status") == "True"
                            and condition.get("message") else ""))
    branches: list[tuple[str, list[str]]] = []
    for application in stack.applications:
        shown = [o for o in application.objects if o.health.needs_a_line]
        healthy = [o for o in application.objects if not o.health.needs_a_line]
        leaves = [f"{MARKS[o.health]} {o.ref}" + (f": {o.why}" if o.why else "") for o in shown]
        if healthy:
            kinds = Counter(o.kind for o in healthy)
            by_count = sorted(kinds.items(), key=lambda kind_count: (-kind_count[1], kind_count[0]))
            leaves.append(f"{MARKS[Health.HEALTHY]} {len(healthy)} healthy: "
                          + ", ".join(f"{n} {kind}" for kind, n in by_count))
        branches.append((f"{application.name} ({_count_line(application.counts())})", leaves))
    if stack.warnings:
        branches.append((f"warnings ({len(stack.warnings)})", stack.warnings))
    for position, (head, leaves) in enumerate(branches):
        last = position == len(branches) - 1
        lines.append(("└── " if last else "├── ") + head)
        for leaf_position, leaf in enumerate(leaves):
            lines.append(("    " if last else "│   ") + ("└── " if leaf_position == len(leaves) - 1 else "├── ") + leaf)
    return "\n".join(lines) + "\n"


def as_json(stack: StackStatus) -> JSON:
    """The tree as JSON (``-o json``): every object, troubled or not."""
    return {"namespace": stack.namespace, "name": stack.name, "ready": stack.ready, "deleting": stack.deleting,
            "summary": stack.summary, "conditions": stack.conditions, "warnings": stack.warnings,
            "applications": [{"name": a.name, "counts": a.counts(),
                              "objects": [{"object": o.ref, "health": o.health.value, "why": o.why}
                                          for o in a.objects]} for a in stack.applications]}


def exit_code(stacks: list[StackStatus]) -> int:
    return EXIT_OK if stacks and all(s.ready for s in stacks) else EXIT_NOT_READY


# -- reading --------------------------------------------------------------------------------------------------------

async def read_stack(kube: KubeClient, discovery: Discovery, kfdef: JSON) -> Observed:
    """The stack's live objects (one labelled LIST per kind, a GET for the few it does not return) and the Events
    on the KfDef."""
    meta = kfdef.get("metadata") or {}
    owner = Owner(meta.get("name", ""), meta.get("namespace", ""), meta.get("uid", ""))
    observed = Observed(kfdef)
    by_kind: dict[tuple[str, str, str], list[ObjectRef]] = {}
    for ref, entry, _ in inventory.read(kfdef.get("status") or {}):
        by_kind.setdefault((ref.group, ref.kind, entry.version), []).append(ref)
    await asyncio.gather(*(_read_kind(kube, discovery, owner, refs, version, observed)
                           for (_, _, version), refs in by_kind.items()))
    events = await kube.get(f"/api/v1/namespaces/{owner.namespace}/events",
                            fieldSelector=f"involvedObject.kind={KIND},involvedObject.name={owner.name}")
    observed.events = [e for e in (events or {}).get("items") or []
                       if (e.get("involvedObject") or {}).get("uid") in (None, "", owner.uid)]
    return observed


async def _read_kind(kube: KubeClient, discovery: Discovery, owner: Owner, refs: list[ObjectRef], version: str,
                     observed: Observed) -> None:
    try:
        resource = await discovery.resource_for_ref(refs[0], version)
    except UnknownKind:
        observed.unreadable.update((ref, "its kind is not served") for ref in refs)
        return
    try:
        listed = await kube.get(resource.collection_path(), labelSelector=owner.selector)
    except KubeApiError as error:
        if error.status != 403:
            raise
        listed = None  # not allowed cluster-wide: read one by one
    found = {ref_of(item): item for item in (listed or {}).get("items") or []}
    for ref in refs:
        if ref in found:
            observed.live[ref] = {"apiVersion": resource.api_version, "kind": ref.kind, **found[ref]}
    missing = [ref for ref in refs if ref not in found]
    results = await asyncio.gather(*(kube.get(resource.path_of(ref)) for ref in missing), return_exceptions=True)
    for ref, result in zip(missing, results, strict=True):
        if isinstance(result, KubeApiError):
            observed.unreadable[ref] = describe_api_error(result)
        elif isinstance(result, BaseException):
            raise result
        else:
            observed.live[ref] = result


async def read_kfdefs(kube: KubeClient, namespace: str, name: str | None) -> list[JSON]:
    if name:
        kfdef = await kube.get(kfdef_path(namespace, name))
        if kfdef is None:
            raise Failed(f"KfDef {namespace}/{name} not found")
        return [kfdef]
    listed = await kube.get(f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}")
    kfdefs = sorted((listed or {}).get("items") or [], key=lambda k: k["metadata"]["name"])
    if not kfdefs:
        raise Failed(f"no KfDef in namespace {namespace}")
    return kfdefs


async def observe(kube: KubeClient, namespace: str, name: str | None) -> list[StackStatus]:
    discovery = Discovery(kube)
    await discovery.refresh()
    kfdefs = await read_kfdefs(kube, namespace, name)
    return [assess(await read_stack(kube, discovery, kfdef)) for kfdef in kfdefs]


# -- the command ----------------------------------------------------------------------------------------------------

def register_status(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "status", help="show a KfDef's stack as a tree: what is unwell and why; exit 0 when Ready",
        description=__doc__.split("\n\n", 1)[1].split("\n\n", 1)[0].replace("``", ""))
    parser.add_argument("name", nargs="?", metavar="NAME", help="the KfDef (default: every KfDef of the namespace)")
    parser.add_argument("-n", "--namespace", default="kubeflow", help="its namespace (default %(default)s)")
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, in-cluster)")
    parser.add_argument("-o", "--output", choices=("tree", "json"), default="tree", help="format (default tree)")
    parser.add_argument("-w", "--watch", action="store_true",
                        help="print again whenever the status changes, until Ready (exit 0) or --timeout (exit 1)")
    parser.add_argument("--timeout", default="0s", metavar="DURATION",
                        help="with --watch: give up after this long (default: never)")
    parser.set_defaults(handler=run_status, failure_exit=EXIT_BAD_INPUT)


def run_status(args: argparse.Namespace) -> int:
    try:
        timeout = parse_duration(args.timeout) if args.timeout not in ("0", "0s") else 0.0
    except ValueError as error:
        raise BadInput(f"--timeout: {error}") from None
    return asyncio.run(_status(args, timeout, sys.stdout))


def show(out: TextIO, stacks: list[StackStatus], output: str, *, named: bool) -> None:
    """The trees, or as JSON: one document for a KfDef named, a list for a namespace's."""
    if output == "json":
        out.write(json.dumps(as_json(stacks[0]) if named else [as_json(s) for s in stacks], indent=2) + "\n")
    else:
        out.write("\n".join(render_tree(s) for s in stacks))
    out.flush()


async def _status(args: argparse.Namespace, timeout: float, out: TextIO) -> int:
    kube = await preflight.connect(args.kubeconfig)
    try:
        deadline = time.monotonic() + timeout if timeout else None
        shown = None
        while True:
            stacks = await observe(kube, args.namespace, args.name)
            text = json.dumps([as_json(s) for s in stacks], sort_keys=True)
            if text != shown:
                if shown is not None and args.output == "tree":
                    out.write("\n")
                show(out, stacks, args.output, named=bool(args.name))
                shown = text
            code = exit_code(stacks)
            if not args.watch or code == EXIT_OK or (deadline is not None and time.monotonic() >= deadline):
                return code
            await asyncio.sleep(WATCH_POLL_S)
    except KubeApiError as error:
        raise Failed(f"{error.method} {error.path}: {describe_api_error(error)}") from None
    finally:
        await kube.close()
