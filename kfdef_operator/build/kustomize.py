"""Run kustomize's build through the render helper ``kfdef-render``, with a scrubbed environment, and read the JSON
it prints.

The helper (``tools/kfdef-render``) is kustomize's own Go API (krusty, builtin plugins only, helm off) on a
filesystem confined to the trees the build may read: whatever a kustomization says, and however kustomize decodes it
(keys in another case, repeated keys, YAML tags), a file outside those trees is refused where kustomize reads it.
Unless remote bases are allowed, every network dial inside the helper fails and it has no ``PATH`` (so no ``git``);
where the kernel offers Landlock it also loses the right to read anything else or open a TCP connection. When they
are allowed, every connection of the helper and its ``git`` goes through the build's proxy (:mod:`.egress`). What it
achieved is :attr:`BuildOutput.confinement`.

The binary (:func:`find_render_helper`) is, in this order:

1. ``$KFDEF_RENDER_HELPER``, a path set explicitly (the operator image sets it to the helper it ships);
2. the newest ``$XDG_CACHE_HOME/kfdef-operator/kfdef-render-kustomize<version>-*/kfdef-render`` that
   ``tools/build-render-helper.sh`` builds (``make control-plane``).

Anything else fails with a clear error: a ``kustomize`` or ``kubectl kustomize`` on ``PATH`` is never used. The
kustomize release whose API the helper is built on (``kfdef-render version``) is part of :class:`RenderHelper` and
shown at operator start and in ``kfdef-operator build``'s summary.
"""

from __future__ import annotations

import functools
import json
import os
import resource
import signal
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kfdef_operator.build.confinement import LOAD_RESTRICTIONS_ROOT_ONLY
from kfdef_operator.build.safe_yaml import MAX_DEPTH, nesting_depth

PINNED_VERSION = "v5.8.2"
"""The kustomize release whose API the helper is built on (tools/build-render-helper.sh, Dockerfile); the CLI of the
same release is what the tests and benchmarks compare against."""

HELPER_NAME = "kfdef-render"

MINIMAL_PATH = "/usr/local/bin:/usr/bin:/bin"
"""``PATH`` of the render process; the helper clears its own unless remote bases are allowed (then ``git`` is
found here)."""

_STDERR_TAIL_LINES = 20

EXIT_FAILED = 1
"""The helper's exit code for a build that failed; its answer says why (``error``, and ``violation`` when the
boundary refused a path)."""
EXIT_PANICKED = 3
"""The helper's exit code for a panic in kustomize, recovered; its answer says what panicked. (Exit code 2 is a usage
error, or one of Go's own fatal errors, which cannot be recovered: then only stderr says why.)"""


@dataclass(frozen=True)
class Refusal:
    """A path the helper's boundary refused during a failed build: the filesystem call kustomize made (``ReadFile``,
    ``CleanedAbs``...), the path as kustomize asked for it, and the kustomization file the helper read last before
    (which is not always the one naming the path)."""

    op: str
    path: str
    kustomization: str = ""


class KustomizeError(RuntimeError):
    """The render helper is missing, or a build failed, timed out or printed something that is not a list of
    objects. ``limit`` names the resource limit it ran into ('memory', 'cpu', 'file size'), if any; ``refusal`` the
    path the helper's boundary refused, if that failed the build. ``shown_path`` is the build directory as people
    know it (never a temporary path)."""

    def __init__(self, message: str, *, path: Path | None, application: str | None = None, stderr_tail: str = "",
                 limit: str | None = None, shown_path: str | None = None, refusal: Refusal | None = None):
        self.path = path
        self.application = application
        self.stderr_tail = stderr_tail
        self.limit = limit
        self.refusal = refusal
        shown = shown_path or str(path)
        where = f"application {application!r} ({shown})" if application else shown
        text = f"kustomize build of {where} failed: {message}" if path else message
        if stderr_tail:
            text += f"\n{stderr_tail}"
        super().__init__(text)


@dataclass(frozen=True)
class RenderHelper:
    """The render helper: where it is, the kustomize release it is built on, and how it was found."""

    path: Path
    version: str
    origin: str

    def describe(self) -> str:
        pinned = "" if self.version == PINNED_VERSION else f"; the tested version is {PINNED_VERSION}"
        return f"kustomize {self.version} through {HELPER_NAME} ({self.path}, {self.origin}{pinned})"

    @property
    def identity(self) -> str:
        """Changes whenever the binary does (a rebuilt binary at the same path is another one)."""
        try:
            modified = os.stat(self.path).st_mtime_ns
        except OSError:
            modified = 0
        return f"{self.path}:{self.version}:{modified}"


def find_render_helper(environ: Mapping[str, str] | None = None) -> RenderHelper:
    """The render helper to use (see the module docstring); raises :class:`KustomizeError` when there is none."""
    env = os.environ if environ is None else environ
    explicit = env.get("KFDEF_RENDER_HELPER")
    if explicit:
        return _checked(Path(explicit), "set by KFDEF_RENDER_HELPER")
    cache = Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kfdef-operator"
    built = sorted(cache.glob(f"{HELPER_NAME}-kustomize{PINNED_VERSION.lstrip('v')}-*/{HELPER_NAME}"),
                   key=lambda p: p.stat().st_mtime, reverse=True)
    if built:
        return _checked(built[0], "built by tools/build-render-helper.sh")
    raise KustomizeError(f"no render helper found: set KFDEF_RENDER_HELPER to a {HELPER_NAME} binary (the operator "
                         "image does), or build it with `make control-plane` (tools/build-render-helper.sh); "
                         "kustomize or kubectl on PATH are not used", path=None)


def _checked(path: Path, origin: str) -> RenderHelper:
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise KustomizeError(f"{path} ({origin}) is not an executable file", path=None)
    return RenderHelper(path, _version(path, os.stat(path).st_mtime_ns), origin)


@functools.lru_cache(maxsize=8)
def _version(path: Path, _modified: int) -> str:
    """The kustomize release of ``HELPER version`` (cached per binary and modification time)."""
    try:
        with tempfile.TemporaryDirectory(prefix="kfdef-render-") as home:
            done = subprocess.run([str(path), "version"], capture_output=True, timeout=30, check=False,
                                  env=scrubbed_environment(Path(home)), stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise KustomizeError(f"`{path} version` failed: {error}", path=None) from None
    words = done.stdout.decode(errors="replace").split()
    if done.returncode != 0 or not words:
        raise KustomizeError(f"`{path} version` exited with {done.returncode}; is it {HELPER_NAME}?", path=None,
                             stderr_tail=_tail(done.stderr))
    return words[0]


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


@dataclass(frozen=True)
class BuildOutput:
    """What one build gave: the objects in kustomize's output order, and how the helper was confined."""

    objects: list[dict[str, Any]]
    confinement: str
    notes: tuple[str, ...] = ()   # fields dropped to read a kustomization as kustomize v3.2 did


def build(path: Path, *, roots: Mapping[Path, str], helper: RenderHelper | None = None, home: Path | None = None,
          load_restrictor: str = LOAD_RESTRICTIONS_ROOT_ONLY, remote_proxy: str | None = None,
          kustomize_v3: bool = False, timeout: float = 120, application: str | None = None) -> BuildOutput:
    """Build the kustomization in ``path`` with the render helper, reading nothing outside ``roots``.

    ``roots`` maps each directory the build may read to the name people know it by (``manifests:``); errors show
    paths by those names. ``helper`` defaults to :func:`find_render_helper`. ``load_restrictor`` is kustomize's
    (``LoadRestrictionsNone`` lets a kustomization read files outside its own folder, still inside ``roots``).
    ``remote_proxy`` (an :class:`~kfdef_operator.build.egress.EgressProxy`'s URL) lets kustomize fetch remote bases
    and URLs, every connection through that proxy (clones go below ``home``, in a directory of this build alone).
    ``kustomize_v3`` reads the tree's kustomizations and transformer configurations as kfctl's kustomize v3.2 did
    (unknown fields dropped, each noted in :attr:`BuildOutput.notes` by the roots' names). ``home`` is the helper's
    own ``HOME``/``TMPDIR`` (created when missing; default: a temporary directory). ``application`` only labels
    error messages.
    """
    if home is None:
        with tempfile.TemporaryDirectory(prefix="kfdef-render-") as temporary:
            return build(path, roots=roots, helper=helper, home=Path(temporary), load_restrictor=load_restrictor,
                         remote_proxy=remote_proxy, kustomize_v3=kustomize_v3, timeout=timeout,
                         application=application)
    home.mkdir(parents=True, exist_ok=True)
    argv = [str((helper or find_render_helper()).path), "build", f"--load-restrictor={load_restrictor}"]
    for root in roots:
        argv.append(f"--root={root}")
    if remote_proxy:
        argv.append(f"--remote-proxy={remote_proxy}")
    if kustomize_v3:
        argv.append("--kustomize-v3")
    argv.append(str(path))
    shown = functools.partial(show_paths, roots={**roots, home: "(build home)/"})
    failed = functools.partial(KustomizeError, path=path, application=application, shown_path=shown(str(path)))
    try:
        done = subprocess.run(argv, capture_output=True, timeout=timeout, check=False, env=scrubbed_environment(home),
                              cwd=home, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        raise failed(f"timed out after {timeout:g}s", stderr_tail=shown(_tail(exc.stderr or b""))) from None
    if done.returncode in (EXIT_FAILED, EXIT_PANICKED):
        failure = _failure(done.stdout)
        if failure is not None:
            message, refusal = failure
            reason = f"exit code {done.returncode}" + (" (kustomize panicked)" if done.returncode == EXIT_PANICKED
                                                        else "")
            raise failed(reason, stderr_tail=shown(f"Error: {message}"), refusal=refusal)
    if done.returncode != 0:
        limit = _limit_hit(done.returncode, done.stderr)
        if done.returncode == -signal.SIGKILL:
            reason = "killed by SIGKILL, most likely by the kernel's out-of-memory killer (the container ran out)"
        elif done.returncode < 0:
            reason = f"killed by {signal_name(-done.returncode)}"
        else:
            reason = f"exit code {done.returncode}" + (" (out of memory)" if limit == "memory" else "")
        raise failed(reason, stderr_tail=shown(_tail(done.stderr)), limit=limit)
    output = parse_output(done.stdout, path=path, application=application)
    return BuildOutput(output.objects, output.confinement, tuple(shown(note) for note in output.notes))


def show_paths(text: str, roots: Mapping[Path, str]) -> str:
    """``text`` with every absolute path below one of ``roots`` written by that root's name (the deepest root
    first), so that no temporary directory of the operator reaches a message."""
    for root, label in sorted(roots.items(), key=lambda item: -len(str(item[0]))):
        for form in {str(root), os.path.realpath(root)}:
            text = text.replace(form.rstrip("/") + "/", label).replace(form, label.rstrip("/") or label)
    return text


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


def parse_output(stream: bytes | str, *, path: Path, application: str | None = None) -> BuildOutput:
    """Read the helper's answer to a build, ``{"confinement": str, "notes": [str, ...], "objects": [object, ...]}``
    (``answer`` in tools/kfdef-render/answer.go); objects nested deeper than :data:`safe_yaml.MAX_DEPTH` are
    refused."""
    failed = functools.partial(KustomizeError, path=path, application=application)
    try:
        answer = json.loads(stream)
    except (ValueError, RecursionError) as exc:
        raise failed(f"output is not valid JSON: {exc}") from None
    if not (isinstance(answer, dict) and isinstance(answer.get("objects"), list)):
        raise failed("output is not a JSON object with a list of objects")
    objects = answer["objects"]
    for index, doc in enumerate(objects):
        if not isinstance(doc, dict):
            raise failed(f"object {index} of the output is a {type(doc).__name__}, not an object")
        if nesting_depth(doc) > MAX_DEPTH:
            raise failed(f"object {index} of the output nests deeper than {MAX_DEPTH} levels")
    notes = answer.get("notes") or []
    if not (isinstance(notes, list) and all(isinstance(note, str) for note in notes)):
        raise failed("the notes of the output are not a list of strings")
    return BuildOutput(objects, str(answer.get("confinement", "")), tuple(notes))


def _failure(stream: bytes) -> tuple[str, Refusal | None] | None:
    """The error and the refused path (if any) of a failed build's answer, ``{"error": str, "violation": {"op":
    str, "path": str, "kustomization": str}}``; None when the output is no such answer."""
    try:
        answer = json.loads(stream)
    except (ValueError, RecursionError):
        return None
    if not (isinstance(answer, dict) and isinstance(answer.get("error"), str) and answer["error"]):
        return None
    violation = answer.get("violation")
    fields = ("op", "path", "kustomization")
    if not (isinstance(violation, dict) and all(isinstance(violation.get(name, ""), str) for name in fields)
            and violation.get("path")):
        return answer["error"], None
    return answer["error"], Refusal(*(violation.get(name, "") for name in fields))


def _tail(stderr: bytes) -> str:
    """What a helper that wrote no answer said: its ``Error:`` lines without kustomize's deprecation warnings, the
    end of the output otherwise, or for one of Go's fatal errors (out of memory, a data race the runtime caught) its
    "fatal error" line rather than the goroutine dump that follows."""
    lines = stderr.decode("utf-8", "replace").strip().splitlines()
    crash = next((i for i, line in enumerate(lines) if line.startswith("fatal error:")), None)
    if crash is not None:
        return lines[crash]
    errors = [line for line in lines if not line.startswith("# Warning:")]
    return "\n".join((errors or lines)[-_STDERR_TAIL_LINES:])
