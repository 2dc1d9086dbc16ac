"""``kfdef-operator run``: the operator process (kopf under the hood).

Flags for running several replicas and shards follow Flux's controllers
(``--enable-leader-election``, ``--leader-election-*``,
``--watch-label-selector``); the namespaces follow kfctl's operator
(``WATCH_NAMESPACE``). See docs/deployment.md.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import logging
import os
import sys
from pathlib import Path

import kopf

from kfdef_operator.api.kfdef import parse_duration, service_account_name_problem
from kfdef_operator.build.egress import RemoteBases
from kfdef_operator.build.isolated import IsolatedRender, RenderLimits
from kfdef_operator.controller import preflight
from kfdef_operator.controller.log_filters import RetriedThrottling
from kfdef_operator.controller.scope import election_namespace, instance_identity, lease_name, watched_namespaces
from kfdef_operator.controller.settings import Settings
from kfdef_operator.runtime.election import ElectionConfig
from kfdef_operator.runtime.memory import limit_malloc_arenas, limit_tls_read_buffers
from kfdef_operator.source.network import NetworkPolicy

_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def _boolean(text: str) -> bool:
    value = text.strip().lower()
    if value in _TRUE or value in _FALSE:
        return value in _TRUE
    raise argparse.ArgumentTypeError(f"{text!r} is not true or false")


def add_build_arguments(parser: argparse.ArgumentParser) -> None:
    """``--no-remote-bases``, shared by ``run`` and ``build`` (Flux's kustomize-controller flag, but on by
    default here)."""
    parser.add_argument(
        "--no-remote-bases", type=_boolean, nargs="?", const=True, metavar="true|false",
        default=os.environ.get("KFDEF_NO_REMOTE_BASES", "").strip() or "true",  # a string default is parsed too
        help="refuse remote bases and URLs in kustomizations (git repositories, http(s) files); default true, "
             "or $KFDEF_NO_REMOTE_BASES. --no-remote-bases=false lets kustomize fetch them (docs/security.md)")


def renderer_from(args: argparse.Namespace, *, networks: NetworkPolicy | None = None,
                  **settings: int) -> IsolatedRender:
    """The renderer the command line asks for; render limits come from ``KFDEF_RENDER_*``, and remote bases (when
    ``--no-remote-bases=false``) are fetched under the source fetches' settings, ``networks`` replacing their
    address policy when given (``ValueError`` names a bad setting)."""
    remote = None if args.no_remote_bases else RemoteBases.from_env(networks=networks)
    return IsolatedRender(remote_bases=remote, limits=RenderLimits.from_env(), **settings)


class JsonFormatter(logging.Formatter):
    """One JSON object per line, for log pipelines."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {"time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"), "level": record.levelname,
                 "logger": record.name, "message": record.getMessage()}
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def register_run(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("run", help="run the operator against a cluster",
                                   description="Watch KfDefs and keep their stacks applied, healthy and healed.")
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, in-cluster)")
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument("-n", "--namespace", action="append", dest="namespaces", metavar="NS",
                       help="watch KfDefs in this namespace only (repeatable; globs allowed); default: "
                            "$WATCH_NAMESPACE (comma-separated), else all namespaces")
    scope.add_argument("-A", "--all-namespaces", action="store_true",
                       help="watch KfDefs everywhere, whatever $WATCH_NAMESPACE says")
    parser.add_argument("--watch-label-selector", default=os.environ.get("KFDEF_WATCH_LABEL_SELECTOR", ""),
                        metavar="SELECTOR",
                        help="serve only the KfDefs matching this label selector (a shard), e.g. "
                             "'kfdef.apps.kubeflow.org/shard=shard1'; the default shard takes "
                             "'!kfdef.apps.kubeflow.org/shard' (default: every KfDef)")
    parser.add_argument("--shard", default=os.environ.get("KFDEF_SHARD", ""), metavar="NAME",
                        help="name of this instance's shard: its replicas elect their leader on the Lease "
                             "kfdef-operator-leader-election-NAME (default: derived from --watch-label-selector)")
    election = parser.add_argument_group("leader election (on a coordination.k8s.io Lease; docs/deployment.md)")
    election.add_argument("--enable-leader-election", action="store_true",
                          default=os.environ.get("KFDEF_ENABLE_LEADER_ELECTION", "").lower() == "true",
                          help="run as one of several replicas: only the leader writes, standbys stay warm")
    election.add_argument("--leader-election-namespace", metavar="NS",
                          help="namespace of the Lease (default: $POD_NAMESPACE, else the pod's own)")
    election.add_argument("--leader-election-lease-duration", type=_duration, default=15.0, metavar="DURATION",
                          help="how long a standby waits after the leader's last renewal (default 15s)")
    election.add_argument("--leader-election-renew-deadline", type=_duration, default=10.0, metavar="DURATION",
                          help="the leader stops if it cannot renew for this long (default 10s)")
    election.add_argument("--leader-election-retry-period", type=_duration, default=2.0, metavar="DURATION",
                          help="renewal and retry interval (default 2s)")
    election.add_argument("--leader-election-release-on-cancel", action=argparse.BooleanOptionalAction,
                          default=True, help="release the lease on shutdown for a fast handover (default on)")
    parser.add_argument("--server-address", default=os.environ.get("KFDEF_SERVER_ADDRESS", "0.0.0.0:8080"),
                        help="host:port for /healthz, /readyz and /metrics ('' disables; default %(default)s)")
    parser.add_argument("--log-format", choices=("text", "json"), default=os.environ.get("KFDEF_LOG_FORMAT", "text"))
    parser.add_argument("--verbose", "-v", action="store_true", help="debug logging")
    parser.add_argument("--work-dir", type=Path, default=None,
                        help="source cache and render directory (default: $XDG_CACHE_HOME/kfdef-operator)")
    parser.add_argument("--api-upgrade", choices=("auto", "off"), default=os.environ.get("KFDEF_API_UPGRADE", "auto"),
                        help="default policy for API versions the cluster no longer serves (docs/upgrade.md)")
    parser.add_argument("--concurrency", type=int, default=24, help="objects applied in parallel per KfDef")
    parser.add_argument("--health-timeout", type=float, default=300.0, metavar="SECONDS",
                        help="how long applied objects may stay unhealthy before the KfDef is Degraded")
    parser.add_argument("--interval", type=_duration, default=os.environ.get("KFDEF_INTERVAL", "10m"),
                        metavar="DURATION",
                        help="default resync interval of a KfDef (re-resolve its sources, correct unseen drift), "
                             "overridden by its spec.interval; jittered by 10%% (default %(default)s)")
    parser.add_argument("--work-threads", type=int, default=4, metavar="N",
                        help="fetches and renders run in parallel, shared fairly between namespaces; up to twice "
                             "as many while one namespace holds them all and others wait (default %(default)s)")
    add_build_arguments(parser)
    parser.add_argument("--default-service-account", type=_service_account,
                        default=os.environ.get("KFDEF_DEFAULT_SERVICE_ACCOUNT", ""), metavar="NAME",
                        help="a KfDef without spec.serviceAccountName acts as this ServiceAccount of its own "
                             "namespace (multi-tenant lockdown, Flux's flag); unset: as the operator itself "
                             "(docs/security.md)")
    parser.set_defaults(handler=run_operator)


def _configure_logging(log_format: str, verbose: bool) -> None:
    handler = logging.StreamHandler()
    if log_format == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    handler.addFilter(RetriedThrottling())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    # kopf logs every handler invocation at INFO; keep its chatter for --verbose.
    logging.getLogger("kopf").setLevel(logging.DEBUG if verbose else logging.WARNING)
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)


def _duration(text: str | float) -> float:
    if isinstance(text, float):
        return text
    try:
        return parse_duration(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _service_account(name: str) -> str:
    problem = service_account_name_problem(name) if name else None
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return name


def default_work_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kfdef-operator"


async def _check_cluster(kubeconfig: str | None, namespaces: list[str], label_selector: str) -> None:
    kube = await preflight.connect(kubeconfig)
    try:
        await preflight.check_kfdef_api(kube, namespaces, label_selector)
    finally:
        await kube.close()


def run_operator(args: argparse.Namespace) -> int:
    from kfdef_operator.controller import handlers  # noqa: F401  (registers the kopf handlers)

    _configure_logging(args.log_format, args.verbose)
    identity = instance_identity()
    try:
        renderer = renderer_from(args)
        namespaces = frozenset() if args.all_namespaces else watched_namespaces(args.namespaces, os.environ)
        election = _election(args, identity) if args.enable_leader_election else None
    except ValueError as error:  # ScopeError is one
        sys.stderr.write(f"error: {error}\n")
        return 2
    limit_malloc_arenas()  # before the first thread
    if args.kubeconfig:
        os.environ["KUBECONFIG"] = args.kubeconfig  # kopf's own login reads it too
    settings = Settings(work_dir=args.work_dir or default_work_dir(), api_upgrade_default=args.api_upgrade,
                        concurrency=args.concurrency, health_timeout=args.health_timeout,
                        interval=_duration(args.interval), namespaces=namespaces,
                        work_threads=args.work_threads, renderer=renderer,
                        default_service_account=args.default_service_account,
                        teardown_wave_timeout=float(os.environ.get("KFDEF_TEARDOWN_WAVE_TIMEOUT") or 60.0))
    memo = kopf.Memo(kubeconfig=args.kubeconfig, settings=settings, server_address=args.server_address,
                     label_selector=args.watch_label_selector, election=election, identity=identity)
    # raises ClusterError: one line, a non-zero exit
    asyncio.run(_check_cluster(args.kubeconfig, sorted(namespaces), args.watch_label_selector))
    # Modules, classes and settings live as long as the process: frozen, the garbage collector's full passes
    # (which pause the event loop, heals included) no longer walk their 60,000-odd containers.
    gc.collect()
    gc.freeze()
    limit_tls_read_buffers()
    serve(memo, namespaces, args.kubeconfig)
    return 0


def serve(memo: kopf.Memo, namespaces: frozenset[str], kubeconfig: str | None) -> None:
    """Run kopf's operator until it stops. Credentials the API server stops accepting (kopf's ``LoginError``: a 401
    on every credential its login gave) end it with a :class:`ClusterError` that says so."""
    try:
        asyncio.run(kopf.operator(standalone=True, clusterwide=not namespaces, namespaces=sorted(namespaces),
                                  memo=memo))
    except kopf.LoginError as error:
        raise preflight.ClusterError(preflight.credentials_revoked(kubeconfig, str(error).split(".")[0])) from None


def _election(args: argparse.Namespace, identity: str) -> ElectionConfig:
    return ElectionConfig(namespace=election_namespace(args.leader_election_namespace, os.environ),
                          name=lease_name(args.shard, args.watch_label_selector), identity=identity,
                          lease_duration=args.leader_election_lease_duration,
                          renew_deadline=args.leader_election_renew_deadline,
                          retry_period=args.leader_election_retry_period,
                          release_on_cancel=args.leader_election_release_on_cancel)
