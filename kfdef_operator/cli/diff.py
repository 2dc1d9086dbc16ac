"""``kfdef-operator diff``: what the operator would change on the live cluster for a KfDef file.

The file is checked and rendered exactly as ``build`` does, its objects go through the operator's own
desired-state pipeline (API-version upgrade, namespaces by scope) and are stamped with the ownership of the
KfDef of that name and namespace (its uid when it exists, so ownerReferences match). Then every apply is a
server-side dry run taking the operator's decisions (:mod:`kfdef_operator.ssa.preview`), and the objects
the live KfDef's ``status.inventory`` holds that the file no longer renders are dry-run pruned. Nothing is
written. Like ``kubectl diff`` and ``flux diff kustomization``: exit 1 when something would change.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import TextIO

from kfdef_operator.api.kfdef import KfDef
from kfdef_operator.api.names import API_UPGRADE_ANNOTATION, DIGEST_ANNOTATION, kfdef_path
from kfdef_operator.api.types import JSON
from kfdef_operator.cli.build import add_render_arguments, renderer_for
from kfdef_operator.cli.errors import EXIT_DIFF_FAILED, EXIT_DIFFERENCES, EXIT_OK, BadInput, Failed
from kfdef_operator.cli.kfdef_file import check_kfdef, read_kfdef
from kfdef_operator.cli.rendering import Progress, render_kfdef
from kfdef_operator.controller import preflight
from kfdef_operator.controller.desired import desire, kept_absent
from kfdef_operator.runtime.inventory import decode as decode_inventory
from kfdef_operator.runtime.ownership import Owner
from kfdef_operator.ssa.apply import RECREATE_PREVIEW, ApplyOptions
from kfdef_operator.ssa.changeset import Action
from kfdef_operator.ssa.client import KubeApiError, KubeClient, describe_api_error, service_account_user
from kfdef_operator.ssa.discovery import Discovery
from kfdef_operator.ssa.manager import ResourceManager
from kfdef_operator.ssa.migration import MIGRATE_PREVIEW
from kfdef_operator.ssa.preview import Difference, preview
from kfdef_operator.upgrade.convert import UnservedApiVersions

DIGEST_PATH = f'metadata.annotations["{DIGEST_ANNOTATION}"]'
#: How each action is shown: a sign in the first column and the words after the object.
SHOWN = {
    Action.CREATED: ("+", "created"),
    Action.CONFIGURED: ("~", "configured"),
    Action.ADOPTED: ("~", "adopted (exists without an owner: taken over, released rather than deleted later)"),
    Action.DELETED: ("-", "pruned (deleted: no longer rendered)"),
    Action.RELEASED: ("-", "released (no longer rendered; kept, the stack's stamps removed)"),
    Action.HELD: ("!", "held (no longer rendered, but holds objects the stack did not create: released and kept)"),
    Action.CONFLICT: ("!", "conflict"),
    Action.FAILED: ("!", "would fail"),
    Action.SKIPPED: ("=", "skipped"),
    Action.UNCHANGED: ("=", "unchanged"),
    Action.GONE: ("=", "already gone"),
}


#: Applies the dry runs tell apart by what they would do besides applying.
RECREATED = ("±", "re-created (an immutable field changed: deleted, then created again)")
MIGRATED = ("~", "migrated (stored versions: objects rewritten at the new storage version first)")


def shown(difference: Difference) -> tuple[str, str]:
    """The sign and the words a difference is shown with."""
    if difference.action is Action.CREATED and difference.message.startswith(RECREATE_PREVIEW):
        return RECREATED
    if difference.message.startswith(MIGRATE_PREVIEW):
        return MIGRATED
    return SHOWN[difference.action]


def register_diff(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "diff", help="show what the operator would change on the cluster for a KfDef file",
        description="Render the KfDef as the operator would and compare it with the live cluster using\n"
                    "server-side dry runs: objects to create, fields to change (drift included), objects to\n"
                    "prune (in the live KfDef's inventory, no longer rendered), conflicts and refusals.\n"
                    "Writes nothing. Needs the rights to read and dry-run apply the stack's objects.")
    add_render_arguments(parser)
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, in-cluster)")
    parser.add_argument("--api-upgrade", choices=("auto", "off"), default="auto",
                        help="policy for API versions the cluster no longer serves when the KfDef has no "
                             f"{API_UPGRADE_ANNOTATION} annotation (the operator's default: auto)")
    parser.add_argument("--as-service-account", nargs="?", const="", metavar="NAME",
                        help="dry-run as the ServiceAccount the operator acts as for this KfDef (its "
                             "spec.serviceAccountName, else NAME: the operator's --default-service-account), so that "
                             "what RBAC would refuse it shows; needs the right to impersonate it")
    parser.add_argument("--show-unchanged", action="store_true", help="also list unchanged and skipped objects")
    parser.set_defaults(handler=run_diff, failure_exit=EXIT_DIFF_FAILED)


def run_diff(args: argparse.Namespace) -> int:
    kfdef = check_kfdef(read_kfdef(args.kfdef), name=args.name, namespace=args.namespace)
    differences, notes = asyncio.run(_diff(kfdef, args))
    return report(sys.stdout, sys.stderr, differences, notes, show_unchanged=args.show_unchanged)


async def _diff(kfdef: KfDef, args: argparse.Namespace) -> tuple[list[Difference], list[str]]:
    renderer = renderer_for(args)
    kube = await preflight.connect(args.kubeconfig)  # before rendering: a cluster problem shows at once
    try:
        rendered, _ = await asyncio.to_thread(render_kfdef, kfdef, args.kfdef, cache_dir=args.cache_dir,
                                              renderer=renderer,
                                              progress=Progress(sys.stderr, len(kfdef.applications)))
        objects = [(app.name, obj) for app in rendered for obj in app.objects]
        return await _compare(kube, kfdef, objects, args.api_upgrade, _acting_as(kfdef, args.as_service_account))
    except KubeApiError as error:
        raise Failed(f"{error.method} {error.path}: {describe_api_error(error)}") from None
    finally:
        await kube.close()


def _acting_as(kfdef: KfDef, default_service_account: str | None) -> str | None:
    """The user the dry runs impersonate: None (the user's own identity) unless --as-service-account is given."""
    if default_service_account is None:
        return None
    name = kfdef.service_account_name or default_service_account
    if not name:
        raise BadInput("--as-service-account: the KfDef names no spec.serviceAccountName; pass the operator's "
                       "--default-service-account as --as-service-account=NAME")
    return service_account_user(kfdef.namespace, name)


async def _compare(kube: KubeClient, kfdef: KfDef, objects: list[tuple[str, JSON]], default_policy: str,
                   acting_as: str | None) -> tuple[list[Difference], list[str]]:
    live_kfdef = await kube.get(kfdef_path(kfdef.namespace, kfdef.name))
    meta = (live_kfdef or {}).get("metadata") or {}
    owner = Owner(kfdef.name, kfdef.namespace, meta.get("uid", ""))
    notes = [f"KfDef {kfdef.namespace}/{kfdef.name} does not exist: everything it renders would be created"
             if live_kfdef is None else f"compared with the live KfDef {kfdef.namespace}/{kfdef.name} and its stack"]
    if meta.get("deletionTimestamp"):
        notes.append("the live KfDef is being deleted: the operator is tearing its stack down, not applying it")
    discovery = Discovery(kube)
    await discovery.refresh()
    try:
        desired, upgraded = desire(kfdef, objects, discovery,
                                   policy=kfdef.annotations.get(API_UPGRADE_ANNOTATION, default_policy))
    except (UnservedApiVersions, ValueError) as error:
        raise Failed(f"the operator would refuse this KfDef: {error}") from None
    if upgraded.upgraded:
        notes.append(f"API versions this cluster no longer serves: {upgraded.summary()}")
    if desired.duplicates:
        notes.append(f"rendered twice (the last one is applied): {', '.join(desired.duplicates)}")
    inventory = decode_inventory((live_kfdef or {}).get("status") or {})
    stale = {ref: entry.version for ref, entry in inventory.items() if ref not in desired.objects}
    options = ApplyOptions(force=kfdef.force,
                           keep_absent=kept_absent(owner, desired, {r: e.run_once for r, e in inventory.items()}))
    differences = [Difference(change.ref, change.action, change.message) for change in desired.rejected]
    if acting_as:
        notes.append(f"dry runs sent as {acting_as}, as the operator sends this stack's writes")
    differences += await preview(ResourceManager(kube.impersonating(acting_as), discovery), owner, desired.served,
                                 desired.not_served_yet, stale, options)
    return differences, notes


def report(out: TextIO, err: TextIO, differences: list[Difference], notes: list[str], *,
           show_unchanged: bool = False) -> int:
    """Print the differences (stdout) and a summary (stderr); the exit code says whether anything would change."""
    for note in notes:
        err.write(f"note: {note}\n")
    for difference in differences:
        if not difference.changes_something and not show_unchanged:
            continue
        sign, words = shown(difference)
        if difference.drifted:
            words += " (drifted from what the operator applied: it re-asserts these fields)"
        message = f": {difference.message}" if difference.message else ""
        out.write(f"{sign} {difference.ref} {words}{message}\n")
        # The digest stamp changes with every change of the desired state: shown only when nothing else does.
        fields = [c for c in difference.fields if c.path != DIGEST_PATH] or difference.fields
        for change in fields:
            out.write(f"    {change}\n")
    counts: dict[str, int] = {}
    for difference in differences:
        label = shown(difference)[1].split(" (")[0]
        counts[label] = counts.get(label, 0) + 1
    changed = [d for d in differences if d.changes_something]
    err.write(f"diff: {', '.join(f'{n} {label}' for label, n in counts.items()) or 'nothing rendered'}; "
              f"{'differences found' if changed else 'no differences'}\n")
    return EXIT_DIFFERENCES if changed else EXIT_OK
