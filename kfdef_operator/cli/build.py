"""``kfdef-operator build``: render a KfDef offline to YAML, exactly as the operator would."""

from __future__ import annotations

import argparse
import collections
import dataclasses
import logging
import sys
from pathlib import Path
from typing import Any, TextIO

from kfdef_operator.build.isolated import IsolatedRender
from kfdef_operator.build.kustomize import find_render_helper
from kfdef_operator.build.render import RenderedApplication
from kfdef_operator.cli.errors import EXIT_OK, BadInput
from kfdef_operator.cli.kfdef_file import check_kfdef, read_kfdef
from kfdef_operator.cli.output import output_target, write
from kfdef_operator.cli.rendering import Progress, default_cache_dir, render_kfdef
from kfdef_operator.controller.runner import add_build_arguments, renderer_from
from kfdef_operator.source.network import ANY, NetworkPolicy
from kfdef_operator.upgrade import convert as upgrade


def add_render_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments that say which KfDef to render and how (``build`` and ``diff``)."""
    parser.add_argument("kfdef", metavar="KFDEF.yaml", help="KfDef file ('-' for stdin)")
    parser.add_argument("--name", help="metadata.name to use when the KfDef has none")
    parser.add_argument("--namespace", help="metadata.namespace to use when the KfDef has none")
    parser.add_argument("--cache-dir", type=Path, default=None,
                        help=f"source cache (default {default_cache_dir()})")
    parser.add_argument("-j", "--jobs", type=int, default=4, help="applications rendered in parallel (default 4)")
    add_build_arguments(parser)


def renderer_for(args: argparse.Namespace) -> IsolatedRender:
    """The renderer the arguments ask for, as the operator renders (:class:`BadInput` for a bad limit)."""
    try:
        # remote bases, like sources, from any network its user can reach
        return renderer_from(args, networks=NetworkPolicy(allowed=ANY), max_workers=args.jobs)
    except ValueError as exc:
        raise BadInput(str(exc)) from None


def register_build(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "build", help="render a KfDef offline to YAML",
        description="Check the KfDef against the CRD's schema and the operator's rules, fetch its repos\n"
                    "(through the source cache) and render its applications as the operator would, without\n"
                    "a cluster. A summary goes to stderr.")
    add_render_arguments(parser)
    parser.add_argument("-o", "--output", default="-", metavar="-|FILE|DIR",
                        help="'-' (default): one YAML stream on stdout; an existing file (or /dev/null) or a new "
                             "*.yaml path: that stream into it; DIR: one NN-<application>.yaml per application in "
                             "apply order, replacing an earlier build's files (a directory holding other files is "
                             "refused)")
    parser.add_argument("--target-version", metavar="1.MINOR",
                        help="convert objects of API versions this Kubernetes release no longer serves (e.g. 1.36) "
                             "to served ones, as the operator does against such a cluster")
    parser.add_argument("--api-upgrade", choices=("auto", "off"), default="auto",
                        help="with --target-version: 'auto' (default) converts unserved objects, 'off' fails "
                             "listing them")
    parser.set_defaults(handler=run_build)


def run_build(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.WARNING, format="warning: %(message)s")
    served = None
    if args.target_version:
        try:
            served = upgrade.served_for_release(args.target_version)
        except ValueError as exc:
            raise BadInput(f"--target-version: {exc}") from None
    target = output_target(args.output, args.kfdef)
    renderer = renderer_for(args)
    kfdef = check_kfdef(read_kfdef(args.kfdef), name=args.name, namespace=args.namespace)
    rendered, elapsed = render_kfdef(kfdef, args.kfdef, cache_dir=args.cache_dir, renderer=renderer,
                                     progress=Progress(sys.stderr, len(kfdef.applications)))
    upgraded = None
    if served is not None:
        rendered, upgraded = _upgrade_rendered(rendered, served, args.api_upgrade)
    write(target, rendered)
    _print_summary(sys.stderr, rendered, elapsed, target.describe())
    confinement = "; ".join(sorted({app.confinement for app in rendered if app.confinement}))
    sys.stderr.write(f"rendered with {find_render_helper().describe()}; remote bases "
                     f"{'allowed' if renderer.allow_remote_bases else 'refused'}; "
                     f"{confinement or 'confinement not reported'}\n")
    if upgraded is not None:
        _print_upgrades(sys.stderr, args.target_version, upgraded)
    return EXIT_OK


def _upgrade_rendered(rendered: list[RenderedApplication], served: upgrade.ServedPredicate,
                      policy: str) -> tuple[list[RenderedApplication], upgrade.UpgradeResult]:
    """All applications upgraded in one call (custom resources of the KfDef's CRDs count as served), split back."""
    flat = [(index, obj) for index, app in enumerate(rendered) for obj in app.objects]
    try:
        result = upgrade.upgrade_objects([obj for _, obj in flat], served, policy=policy)
    except upgrade.UnservedApiVersions as exc:
        raise BadInput(f"{len(exc.objects)} objects use API versions Kubernetes does not serve (--api-upgrade "
                       f"{policy}): " + "; ".join(item.describe() for item in exc.objects)) from None
    per_app: list[list[dict[str, Any]]] = [[] for _ in rendered]
    for origin, obj in zip(result.origin, result.objects, strict=True):
        per_app[flat[origin][0]].append(obj)
    apps = [dataclasses.replace(app, objects=objects) for app, objects in zip(rendered, per_app, strict=True)]
    return apps, result


def _print_upgrades(stream: TextIO, target: str, result: upgrade.UpgradeResult) -> None:
    kinds = collections.Counter(f"{item.kind} {item.from_version} -> {item.to_version}" for item in result.upgraded)
    stream.write(f"API versions for Kubernetes {target}: {result.summary()}\n")
    for line, count in sorted(kinds.items()):
        stream.write(f"  upgraded: {line} ({count})\n")
    for item in result.upgraded:
        for note in item.notes:
            stream.write(f"  note: {item.kind} {item.name}: {note}\n")
    for refused in result.unserved:
        stream.write(f"warning: not served by Kubernetes {target} and not convertible, left out: "
                     f"{refused.describe()}: {refused.reason}\n")


def _print_summary(stream: TextIO, rendered: list[RenderedApplication], elapsed: float, written_to: str) -> None:
    kinds: collections.Counter[str] = collections.Counter()
    namespaces: collections.Counter[str] = collections.Counter()
    width = max((len(app.name) for app in rendered), default=11)
    stream.write(f"{'application':<{width}}  mode    objects  seconds\n")
    for app in rendered:
        stream.write(f"{app.name:<{width}}  {app.mode:<6}  {len(app.objects):>7}  {app.seconds:>7.2f}\n")
        for warning in app.warnings:
            stream.write(f"  warning: {warning}\n")
        for obj in app.objects:
            kinds[str(obj.get("kind"))] += 1
            namespace = (obj.get("metadata") or {}).get("namespace")
            namespaces[namespace or "(cluster-scoped or none)"] += 1
    total = sum(len(app.objects) for app in rendered)
    stream.write(f"{total} objects in {len(rendered)} applications, rendered in {elapsed:.2f}s, written to "
                 f"{written_to}\n")
    stream.write("kinds: " + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())) + "\n")
    stream.write("namespaces: " + ", ".join(f"{k} {n}" for k, n in sorted(namespaces.items())) + "\n")
    if not rendered:
        stream.write("warning: spec.applications is empty: the operator would apply nothing (and prune everything "
                     "this KfDef applied before)\n")
