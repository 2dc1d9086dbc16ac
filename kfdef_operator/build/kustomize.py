"""Run ``kustomize build`` as a subprocess, with a scrubbed environment, and parse the YAML stream it prints.

The binary (:func:`find_kustomize`) is, in this order:

1. ``$KFDEF_KUSTOMIZE``, a path set explicitly (the operator image sets it to the kustomize it ships);
2. the pinned kustomize (:data:`PINNED_VERSION`) that ``tools/build-control-plane.sh`` builds into the
   control-plane bin directory: ``$KFDEF_K8SBIN/kustomize``, else the newest
   ``$XDG_CACHE_HOME/kfdef-operator/k8sbin-*-kustomize<version>-*/kustomize``.

Anything else fails with a clear error: a ``kustomize`` or ``kubectl kustomize`` that happens to be on ``PATH`` is
never picked silently, since another version renders differently. Its version (``kustomize version``) is part of
:class:`KustomizeBinary` and shown at operator start and in ``kfdef-operator build``'s summary.

kustomize runs with :func:`scrubbed_environment`: no credentials, kubeconfig, proxies or cloud variables of the
operator, its own ``HOME`` and ``TMPDIR``, a minimal ``PATH``; plugins, exec functions and helm stay disabled
(their flags are never passed).
"""

from __future__ import annotations

import functools
import os
import resource
import signal
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from kfdef_operator.build.confinement import LOAD_RESTRICTIONS_ROOT_ONLY
from kfdef_operator.build.safe_yaml import MAX_DEPTH, SafeLoader, nesting_depth

PINNED_VERSION = "v5.8.2"
"""The kustomize the project builds, tests and ships (tools/build-control-plane.sh, Dockerfile)."""

MINIMAL_PATH = "/usr/local/bin:/usr/bin:/bin"
"""``PATH`` of kustomize: enough for ``git`` (remote bases, when allowed), nothing of the operator's own."""

_STDERR_TAIL_LINES = 20


class KustomizeError(RuntimeError):
    """kustomize is missing, or ``kustomize build`` failed, timed out or printed something that is not a list of
    objects. ``limit`` names the resource limit it ran into ('memory', 'cpu', 'file size'), if any."""

    def __init__(self, message: str, *, path: Path | None, application: str | None = None, stderr_tail: str = "",
                 limit: str | None = None):
        self.path = path
        self.application = application
        self.stderr_tail = stderr_tail
        self.limit = limit
        where = f"application {application!r} ({path})" if application else str(path)
        text = f"kustomize build of {where} failed: {message}" if path else message
        if stderr_tail:
            text += f"\n{stderr_tail}"
        super().__init__(text)


@dataclass(frozen=True)
class KustomizeBinary:
    """The kustomize that renders: where it is, its version, and how it was found."""

    path: Path
    version: str
    origin: str

    def describe(self) -> str:
        pinned = "" if self.version == PINNED_VERSION else f"; the tested version is {PINNED_VERSION}"
        return f"kustomize {self.version} ({self.path}, {self.origin}{pinned})"

    @property
    def identity(self) -> str:
        """Changes whenever the binary does (a rebuilt binary at the same path is another one)."""
        try:
            modified = os.stat(self.path).st_mtime_ns
        except OSError:
            modified = 0
        return f"{self.path}:{self.version}:{modified}"


def find_kustomize(environ: Mapping[str, str] | None = None) -> KustomizeBinary:
    """The kustomize to use (see the module docstring); raises :class:`KustomizeError` when there is none."""
    env = os.environ if environ is None else environ
    explicit = env.get("KFDEF_KUSTOMIZE")
    if explicit:
        return _checked(Path(explicit), "set by KFDEF_KUSTOMIZE")
    bin_dir = env.get("KFDEF_K8SBIN")
    if bin_dir and (Path(bin_dir) / "kustomize").is_file():
        return _checked(Path(bin_dir) / "kustomize", "pinned, from KFDEF_K8SBIN")
    cache = Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kfdef-operator"
    pinned = sorted(cache.glob(f"k8sbin-*-kustomize{PINNED_VERSION.lstrip('v')}-*/kustomize"),
                    key=lambda p: p.stat().st_mtime, reverse=True)
    if pinned:
        return _checked(pinned[0], "pinned, from the control-plane build cache")
    raise KustomizeError(f"no kustomize found: set KFDEF_KUSTOMIZE to a kustomize {PINNED_VERSION} binary (the "
                         "operator image does), or build the pinned one with `make control-plane`; kustomize or "
                         "kubectl on PATH are not used", path=None)


def _checked(path: Path, origin: str) -> KustomizeBinary:
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise KustomizeError(f"{path} ({origin}) is not an executable file", path=None)
    return KustomizeBinary(path, _version(path, os.stat(path).st_mtime_ns), origin)


@functools.lru_cache(maxsize=8)
def _version(path: Path, _modified: int) -> str:
    """``kustomize version`` (cached per binary and modification time)."""
    try:
        with tempfile.TemporaryDirectory(prefix="kfdef-kustomize-") as home:
            done = subprocess.run([str(path), "version"], capture_output=True, timeout=30, check=False,
                                  env=scrubbed_environment(Path(home)), stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise KustomizeError(f"`{path} version` failed: {error}", path=None) from None
    lines = done.stdout.decode(errors="replace").split()
    if done.returncode != 0 or not lines:
        raise KustomizeError(f"`{path} version` exited with {done.returncode}; is it kustomize?", path=None,
                             stderr_tail=_tail(done.stderr))
    return lines[0]


GO_GC_PERCENT = "400"
"""kustomize's ``GOGC``: a large build (Kubeflow v1.11.0's ``example/``, 653 objects) spends much of its CPU in Go's
garbage collector at the default 100. At 400 under :data:`GO_MEMORY_LIMIT` it takes 0.9 x the wall time and 0.85 x
the CPU at the same peak memory (about 275 MiB)."""

GO_MEMORY_LIMIT = 256 * 1024 * 1024
"""kustomize's ``GOMEMLIMIT``: near it Go collects as often as at its default setting, so a large build holds no more
than it did. A looser limit buys more speed with memory the operator's container does not have: at 512 MiB the
v1.11.0 build takes 0.76 x the time but holds 500 MiB, beside the operator in deploy/'s 512 MiB limit."""


def go_memory_limit() -> int:
    """kustomize's ``GOMEMLIMIT`` in bytes: :data:`GO_MEMORY_LIMIT`, or half the inherited RLIMIT_DATA (the
    render's memory limit) when that is lower. The hard limit still stops a runaway build."""
    soft, _ = resource.getrlimit(resource.RLIMIT_DATA)
    return GO_MEMORY_LIMIT if soft == resource.RLIM_INFINITY else min(GO_MEMORY_LIMIT, soft // 2)


def scrubbed_environment(home: Path) -> dict[str, str]:
    """The whole environment kustomize (and ``git``, for allowed remote bases) gets: none of the operator's
    variables (credentials, ``KUBECONFIG``, proxies, cloud settings), ``HOME``/``TMPDIR``/XDG directories in
    ``home``, :data:`MINIMAL_PATH`, git told never to prompt or read a system configuration, and Go's garbage
    collector tuned for speed within the memory limit (:data:`GO_GC_PERCENT`, :func:`go_memory_limit`)."""
    return {"PATH": MINIMAL_PATH, "HOME": str(home), "TMPDIR": str(home), "XDG_CONFIG_HOME": str(home / ".config"),
            "XDG_CACHE_HOME": str(home / ".cache"), "LANG": "C.UTF-8", "GIT_TERMINAL_PROMPT": "0",
            "GIT_CONFIG_NOSYSTEM": "1", "GOGC": GO_GC_PERCENT, "GOMEMLIMIT": str(go_memory_limit())}


def build(path: Path, *, binary: KustomizeBinary | None = None, home: Path | None = None,
          load_restrictor: str = LOAD_RESTRICTIONS_ROOT_ONLY, timeout: float = 120,
          application: str | None = None) -> list[dict[str, Any]]:
    """Build the kustomization in ``path`` and return its objects in kustomize's output order.

    ``binary`` defaults to :func:`find_kustomize`. ``load_restrictor`` is kustomize's ``--load-restrictor``; pass
    ``LoadRestrictionsNone`` only for a tree :func:`confinement.walk` has proven to stay inside. ``home`` is
    kustomize's own ``HOME``/``TMPDIR`` (created when missing; default: a temporary directory). ``application``
    only labels error messages.
    """
    if home is None:
        with tempfile.TemporaryDirectory(prefix="kfdef-kustomize-") as temporary:
            return build(path, binary=binary, home=Path(temporary), load_restrictor=load_restrictor, timeout=timeout,
                         application=application)
    home.mkdir(parents=True, exist_ok=True)
    argv = [str((binary or find_kustomize()).path), "build", f"--load-restrictor={load_restrictor}", str(path)]
    try:
        done = subprocess.run(argv, capture_output=True, timeout=timeout, check=False, env=scrubbed_environment(home),
                              cwd=home, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        raise KustomizeError(f"timed out after {timeout:g}s", path=path, application=application,
                             stderr_tail=_tail(exc.stderr or b"")) from None
    if done.returncode != 0:
        limit = _limit_hit(done.returncode, done.stderr)
        if done.returncode == -signal.SIGKILL:
            reason = "killed by SIGKILL, most likely by the kernel's out-of-memory killer (the container ran out)"
        elif done.returncode < 0:
            reason = f"killed by {signal_name(-done.returncode)}"
        else:
            reason = f"exit code {done.returncode}" + (" (out of memory)" if limit == "memory" else "")
        raise KustomizeError(reason, path=path, application=application, stderr_tail=_tail(done.stderr), limit=limit)
    return parse_objects(done.stdout, path=path, application=application)


def signal_name(number: int) -> str:
    """``SIGSEGV`` for 11; ``signal 99`` for a number without a name."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _limit_hit(returncode: int, stderr: bytes) -> str | None:
    """The resource limit a failed kustomize ran into: SIGXCPU and SIGXFSZ come from RLIMIT_CPU and RLIMIT_FSIZE;
    Go reports a failed allocation (RLIMIT_DATA) as a fatal "out of memory" error."""
    if returncode == -signal.SIGXCPU:
        return "cpu"
    if returncode == -signal.SIGXFSZ:
        return "file size"
    if b"out of memory" in stderr[:4096] or b"out of memory" in stderr[-4096:]:
        return "memory"
    return None


def parse_objects(stream: bytes | str, *, path: Path, application: str | None = None) -> list[dict[str, Any]]:
    """Parse a YAML stream of objects, skipping empty documents; objects nested deeper than
    :data:`safe_yaml.MAX_DEPTH` are refused."""
    try:
        documents = list(yaml.load_all(stream, Loader=SafeLoader))
    except yaml.YAMLError as exc:
        raise KustomizeError(f"output is not valid YAML: {exc}", path=path, application=application) from None
    objects = []
    for index, doc in enumerate(documents):
        if doc is None:
            continue
        if not isinstance(doc, dict):
            raise KustomizeError(f"document {index} of the output is a {type(doc).__name__}, not an object",
                                 path=path, application=application)
        if nesting_depth(doc) > MAX_DEPTH:
            raise KustomizeError(f"document {index} of the output nests deeper than {MAX_DEPTH} levels",
                                 path=path, application=application)
        objects.append(doc)
    return objects


def _tail(stderr: bytes) -> str:
    """The end of kustomize's stderr, or for a Go crash its "fatal error"/"panic" line rather than the goroutine
    dump that follows."""
    lines = stderr.decode("utf-8", "replace").strip().splitlines()
    crash = next((i for i, line in enumerate(lines) if line.startswith(("fatal error:", "panic:"))), None)
    return lines[crash] if crash is not None else "\n".join(lines[-_STDERR_TAIL_LINES:])
