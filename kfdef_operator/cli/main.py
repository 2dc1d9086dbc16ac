"""``kfdef-operator`` command line.

Each subcommand lives in one ``register_<name>(subparsers)`` function that adds its parser and sets
``handler`` (a function ``(args) -> exit code``); ``SUBCOMMANDS`` lists them. To add a subcommand, write
its register function and append it there.

Exit codes: 0 success; 1 a source or render failure; 2 bad input (unreadable or invalid KfDef, bad usage).
Failures print one line ``error: <reason>`` on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import dataclasses
import collections
import logging
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, NoReturn, Sequence, TextIO

import yaml

from kfdef_operator import __version__

from kfdef_operator.upgrade import convert as upgrade
from kfdef_operator.build.kustomize import KustomizeError, find_kustomize
from kfdef_operator.build.safe_yaml import SafeDumper, SafeLoader
from kfdef_operator.api.kfdef import InvalidKfDef, parse_kfdef
from kfdef_operator.build.render import RenderedApplication, RenderError
from kfdef_operator.source.cache import SourceCache
from kfdef_operator.source.errors import SourceError
from kfdef_operator.source.network import ANY, NetworkPolicy
from kfdef_operator.source.options import FetchOptions
from kfdef_operator.source.resolve import resolve_sources
from kfdef_operator.controller.runner import add_build_arguments, register_run, renderer_from

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2

Handler = Callable[[argparse.Namespace], int]


class BadInput(Exception):
    """The user's input cannot be used; the message is the one-line reason."""


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "kfdef-operator" / "sources"


# --- build ------------------------------------------------------------------------------------------------

def register_build(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "build", help="render a KfDef offline to YAML",
        description="Fetch the KfDef's repos (through the source cache) and render its applications as kfctl "
                    "would, without a cluster. A summary goes to stderr.")
    parser.add_argument("kfdef", metavar="KFDEF.yaml", help="KfDef file ('-' for stdin)")
    parser.add_argument("-o", "--output", default="-", metavar="DIR|-",
                        help="'-' (default): one YAML stream on stdout; DIR: one file per application, "
                             "NN-<application>.yaml in apply order")
    parser.add_argument("--name", help="metadata.name to use when the KfDef has none")
    parser.add_argument("--namespace", help="metadata.namespace to use when the KfDef has none")
    parser.add_argument("--cache-dir", type=Path, default=None,
                        help=f"source cache (default {default_cache_dir()})")
    parser.add_argument("-j", "--jobs", type=int, default=4, help="applications rendered in parallel (default 4)")
    parser.add_argument("--target-version", metavar="1.MINOR",
                        help="convert objects of API versions this Kubernetes release no longer serves (e.g. 1.36) "
                             "to served ones, as the operator does against such a cluster")
    parser.add_argument("--api-upgrade", choices=("auto", "off"), default="auto",
                        help="with --target-version: 'auto' (default) converts unserved objects, 'off' fails "
                             "listing them")
    add_build_arguments(parser)
    parser.set_defaults(handler=run_build)


def run_build(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.WARNING, format="warning: %(message)s")
    kfdef_file = args.kfdef
    served = None
    if args.target_version:
        try:
            served = upgrade.served_for_release(args.target_version)
        except ValueError as exc:
            raise BadInput(f"--target-version: {exc}") from None
    try:
        renderer = renderer_from(args, max_workers=args.jobs)
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    kfdef = parse_kfdef(_load_kfdef_document(kfdef_file), default_name=args.name, default_namespace=args.namespace)
    progress = _Progress(sys.stderr, len(kfdef.applications))
    base_dir = Path.cwd() if kfdef_file == "-" else Path(kfdef_file).resolve().parent
    started = time.monotonic()
    progress.note(f"resolving {len(kfdef.repos)} repo(s)")
    # build runs with its user's own identity: any local path and any network the user can reach.
    options = FetchOptions.from_env(base_dir=base_dir, local_roots=None, networks=NetworkPolicy(allowed=ANY))
    sources = resolve_sources(kfdef.repos, SourceCache(args.cache_dir or default_cache_dir()), options)
    with tempfile.TemporaryDirectory(prefix="kfdef-build-") as workdir:
        rendered = renderer(kfdef, sources, Path(workdir), progress=progress.done)
    elapsed = time.monotonic() - started
    progress.finish()
    upgraded = None
    if args.target_version:
        rendered, upgraded = _upgrade_rendered(rendered, served, args.api_upgrade)
    if args.output == "-":
        _write_stream(sys.stdout, [obj for app in rendered for obj in app.objects])
    else:
        _write_directory(Path(args.output), rendered)
    _print_summary(sys.stderr, rendered, elapsed)
    sys.stderr.write(f"rendered with {find_kustomize().describe()}; remote bases "
                     f"{'allowed' if renderer.allow_remote_bases else 'refused'}\n")
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
    for origin, obj in zip(result.origin, result.objects):
        per_app[flat[origin][0]].append(obj)
    apps = [dataclasses.replace(app, objects=objects) for app, objects in zip(rendered, per_app)]
    return apps, result


def _print_upgrades(stream: TextIO, target: str, result: upgrade.UpgradeResult) -> None:
    kinds = collections.Counter(f"{item.kind} {item.from_version} -> {item.to_version}" for item in result.upgraded)
    stream.write(f"API versions for Kubernetes {target}: {result.summary()}\n")
    for line, count in sorted(kinds.items()):
        stream.write(f"  upgraded: {line} ({count})\n")
    for item in result.upgraded:
        for note in item.notes:
            stream.write(f"  note: {item.kind} {item.name}: {note}\n")
    for item in result.unserved:
        stream.write(f"warning: not served by Kubernetes {target} and not convertible, left out: "
                     f"{item.describe()}: {item.reason}\n")


def _load_kfdef_document(path: str) -> dict[str, Any]:
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text()
    except OSError as exc:
        raise BadInput(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        documents = [d for d in yaml.load_all(text, Loader=SafeLoader) if d is not None]
    except yaml.YAMLError as exc:
        raise BadInput(f"{path} is not valid YAML: {' '.join(str(exc).split())}") from None
    kfdefs = [d for d in documents if isinstance(d, dict) and d.get("kind") == "KfDef"]
    if len(kfdefs) != 1:
        raise BadInput(f"{path} must hold exactly one KfDef document, found {len(kfdefs)}")
    return kfdefs[0]


def _write_stream(out: TextIO, objects: list[dict[str, Any]]) -> None:
    yaml.dump_all(objects, out, Dumper=SafeDumper, sort_keys=False, default_flow_style=False,
                  explicit_start=True)


def _write_directory(directory: Path, rendered: list[RenderedApplication]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    width = len(str(len(rendered)))
    for index, app in enumerate(rendered, 1):
        with open(directory / f"{index:0{width}d}-{app.name}.yaml", "w") as out:
            _write_stream(out, app.objects)


class _Progress:
    """Per-application progress lines on stderr, only when stderr is a terminal."""

    def __init__(self, stream: TextIO, total: int):
        self.stream, self.total, self.finished = stream, total, 0
        self.enabled = stream.isatty()

    def note(self, text: str) -> None:
        if self.enabled:
            self.stream.write(f"{text}...\n")

    def done(self, app: RenderedApplication) -> None:
        self.finished += 1  # called from worker threads; a lost update only skews the counter shown
        if self.enabled:
            self.stream.write(f"\r[{self.finished}/{self.total}] {app.name} ({app.seconds:.1f}s)\x1b[K")
            self.stream.flush()

    def finish(self) -> None:
        if self.enabled and self.finished:
            self.stream.write("\n")


def _print_summary(stream: TextIO, rendered: list[RenderedApplication], elapsed: float) -> None:
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
    stream.write(f"{total} objects in {len(rendered)} applications, rendered in {elapsed:.2f}s\n")
    stream.write("kinds: " + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())) + "\n")
    stream.write("namespaces: " + ", ".join(f"{k} {n}" for k, n in sorted(namespaces.items())) + "\n")


# --- entry point ------------------------------------------------------------------------------------------

SUBCOMMANDS: list[Callable[[argparse._SubParsersAction], None]] = [register_build, register_run]


class _Parser(argparse.ArgumentParser):
    """Usage errors as one ``error:`` line (exit 2), like every other bad input."""

    def error(self, message: str) -> "NoReturn":
        self.exit(EXIT_BAD_INPUT, f"error: {message} (see {self.prog} --help)\n")


def make_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="kfdef-operator", description="Deploy and render KfDef resources.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for register in SUBCOMMANDS:
        register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = make_parser().parse_args(argv)
    except SystemExit as exc:  # --help, --version and usage errors (already printed)
        return exc.code if isinstance(exc.code, int) else EXIT_BAD_INPUT
    handler: Handler = args.handler
    try:
        return handler(args)
    except (BadInput, InvalidKfDef) as exc:
        return _fail(str(exc), EXIT_BAD_INPUT)
    except (SourceError, RenderError, KustomizeError) as exc:
        return _fail(str(exc), EXIT_FAILED)
    except KeyboardInterrupt:
        return _fail("interrupted", 130)


def _fail(message: str, code: int) -> int:
    sys.stderr.write("error: " + " | ".join(line.strip() for line in message.splitlines() if line.strip()) + "\n")
    return code


if __name__ == "__main__":
    sys.exit(main())
