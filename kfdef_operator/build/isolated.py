"""Render a KfDef in a child process with resource limits, so untrusted manifests can fail only their own KfDef.

Everything a render does with untrusted bytes (copying the tree, parsing kustomizations, writing the generated ones,
running kustomize, parsing its output) happens in a process of its own, forked for that render alone by the render
fork server (:mod:`kfdef_operator.build.forkserver`, which has this module imported), in its own session with a
scrubbed environment. The child first limits itself (:class:`RenderLimits`; kustomize inherits the
limits), raises its ``oom_score_adj`` so that the kernel's out-of-memory killer picks a render before the operator,
then renders with :func:`render.render` and writes its answer as JSON to a file; progress comes as JSON lines on
stdout. The operator reads only that JSON (bounded, checked field by field), never a pickle or objects of the child.

Whatever happens to the child becomes a :class:`RenderError` naming the limit and the setting that raises it:
past the wall-time limit the whole process group (kustomize, git) is killed; a child killed by a signal, out of
memory or CPU time, or unable to write its answer fails only that KfDef. The request travels the other way as a
pickle: the operator writes it, its own child reads it.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import pickle
import resource
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kfdef_operator.api.kfdef import KfDef
from kfdef_operator.build.cache import applications_from_json, applications_to_json
from kfdef_operator.build.egress import RemoteBases
from kfdef_operator.build.forkserver import ForkServer, ForkServerError
from kfdef_operator.build.kustomize import (
    MINIMAL_PATH,
    KustomizeError,
    RenderHelper,
    find_render_helper,
    signal_name,
)
from kfdef_operator.build.render import RenderedApplication, RenderError, render
from kfdef_operator.source.interrupt import Interrupt
from kfdef_operator.source.resolved import ResolvedSource

log = logging.getLogger(__name__)

_MiB = 1024 * 1024
_GiB = 1024 * _MiB
ANSWER_FILE = "render-answer.json"
STDERR_FILE = "render-stderr.txt"
_MAX_LOG_RECORDS = 100
_stopping = threading.Event()
_MAX_PROGRESS_LINE = 64 * 1024


def _size(text: str) -> int:
    """``1Gi``, ``512Mi``, ``64Ki`` or a number of bytes."""
    units = {"Ki": 1024, "Mi": _MiB, "Gi": _GiB}
    for suffix, factor in units.items():
        if text.endswith(suffix):
            return int(float(text[: -len(suffix)]) * factor)
    return int(text)


def _human(size: int) -> str:
    for factor, unit in ((_GiB, "GiB"), (_MiB, "MiB")):
        if size >= factor and size % (factor // 16) == 0:
            return f"{size / factor:g} {unit}"
    return f"{size} bytes"


@dataclass(frozen=True)
class RenderLimits:
    """Limits of one KfDef's render. ``memory_bytes`` is RLIMIT_DATA (heap and other private writable memory)
    per process, the render process and each kustomize alike: Go reserves far more address space than it uses, so
    RLIMIT_AS would have to be loose (kustomize v5.8.2 does not start below about 750 MiB of it).
    ``cpu_seconds`` is RLIMIT_CPU per process, ``file_bytes`` RLIMIT_FSIZE (the largest file a render may write,
    its answer included), ``wall_seconds`` the whole render's deadline."""

    wall_seconds: float = 600.0
    cpu_seconds: int = 600
    memory_bytes: int = _GiB
    file_bytes: int = 256 * _MiB

    SETTINGS = {"wall": "KFDEF_RENDER_TIMEOUT", "cpu": "KFDEF_RENDER_CPU_SECONDS", "memory": "KFDEF_RENDER_MEMORY",
                "file size": "KFDEF_RENDER_FILE_SIZE"}

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> RenderLimits:
        """Defaults overridden by ``KFDEF_RENDER_TIMEOUT`` (seconds), ``KFDEF_RENDER_CPU_SECONDS``,
        ``KFDEF_RENDER_MEMORY`` and ``KFDEF_RENDER_FILE_SIZE`` (bytes, or with Ki/Mi/Gi); raises ``ValueError``
        naming a bad one."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for name, variable, parse in (("wall_seconds", "KFDEF_RENDER_TIMEOUT", float),
                                      ("cpu_seconds", "KFDEF_RENDER_CPU_SECONDS", int),
                                      ("memory_bytes", "KFDEF_RENDER_MEMORY", _size),
                                      ("file_bytes", "KFDEF_RENDER_FILE_SIZE", _size)):
            raw = env.get(variable, "").strip()
            if raw:
                try:
                    values[name] = parse(raw)
                except ValueError:
                    raise ValueError(f"{variable}={raw!r} is not a valid value") from None
                if values[name] <= 0:
                    raise ValueError(f"{variable} must be positive")
        return cls(**values)

    def explain(self, limit: str) -> str:
        """``exceeded the 1 GiB memory limit per process (KFDEF_RENDER_MEMORY)`` for ``limit`` 'memory'."""
        amount = {"wall": f"{self.wall_seconds:g} s wall-time limit", "cpu": f"{self.cpu_seconds} s CPU-time limit "
                  "per process", "memory": f"{_human(self.memory_bytes)} memory limit per process",
                  "file size": f"{_human(self.file_bytes)} file-size limit"}[limit]
        return f"exceeded the {amount} ({self.SETTINGS[limit]})"

    def describe(self) -> str:
        return (f"wall {self.wall_seconds:g} s, CPU {self.cpu_seconds} s and memory {_human(self.memory_bytes)} per "
                f"process, files up to {_human(self.file_bytes)}")


@dataclass(frozen=True)
class IsolatedRender:
    """The operator's renderer: ``render.render`` in a child process under :class:`RenderLimits`.

    ``remote_bases`` is set when the operator flag ``--no-remote-bases`` is false (Flux's name; remote bases and
    URLs in kustomizations are refused unless it is): they are then fetched under its address policy.
    ``kustomize_timeout`` bounds each ``kustomize build``.
    """

    remote_bases: RemoteBases | None = None
    limits: RenderLimits = field(default_factory=RenderLimits)
    max_workers: int = 4
    kustomize_timeout: float = 120.0

    def settings(self) -> str:
        """What the result depends on besides the KfDef and its sources (part of the render cache key)."""
        try:
            helper = find_render_helper().identity
        except KustomizeError as error:
            helper = f"unavailable: {error}"  # the render itself reports it
        remote = f"allowed ({self.remote_bases.describe()})" if self.remote_bases else "refused"
        return f"render-helper={helper};remote-bases={remote}"

    @property
    def allow_remote_bases(self) -> bool:
        return self.remote_bases is not None

    def __call__(self, kfdef: KfDef, sources: Mapping[str, ResolvedSource], workdir: Path, *,
                 progress: Callable[[RenderedApplication], None] | None = None,
                 interrupt: Interrupt | None = None) -> list[RenderedApplication]:
        """Render ``kfdef`` in a child process; raises ``RenderError`` (or ``KustomizeError`` when there is no
        kustomize). ``progress`` gets each application as it finishes, without its objects; ``interrupt``, once
        set, kills the render."""
        return _Child(self, kfdef, dict(sources), Path(workdir).resolve(), find_render_helper()).run(progress,
                                                                                                    interrupt)


def stop_renders() -> None:
    """Kill every render in progress, and any started from now on: the process is stopping, and a render (up to
    its wall-time limit) must not keep it alive past its grace period."""
    _stopping.set()
    _FORK_SERVER.close()


@dataclass(frozen=True)
class _Request:
    """What the child needs (pickled by the operator for its own child)."""

    kfdef: KfDef
    sources: dict[str, ResolvedSource]
    workdir: Path
    helper: RenderHelper
    settings: IsolatedRender


class _Child:
    """One render process, from start to answer."""

    def __init__(self, settings: IsolatedRender, kfdef: KfDef, sources: dict[str, ResolvedSource], workdir: Path,
                 helper: RenderHelper) -> None:
        self.settings, self.kfdef, self.workdir = settings, kfdef, workdir
        self.request = _Request(kfdef, sources, workdir, helper, settings)
        self.limits = settings.limits
        self.subject = f"render of KfDef {kfdef.namespace}/{kfdef.name}"

    def run(self, progress: Callable[[RenderedApplication], None] | None,
            interrupt: Interrupt | None = None) -> list[RenderedApplication]:
        self.workdir.mkdir(parents=True, exist_ok=True)
        for name in (ANSWER_FILE, STDERR_FILE):
            (self.workdir / name).unlink(missing_ok=True)
        stdin, request_pipe = os.pipe()
        progress_pipe, stdout = os.pipe()
        try:
            with open(self.workdir / STDERR_FILE, "wb") as stderr:
                process = _FORK_SERVER.spawn(self.workdir, _environment(self.workdir / "home"),
                                             (stdin, stdout, stderr.fileno()))
        except (OSError, ForkServerError) as error:
            os.close(request_pipe)
            os.close(progress_pipe)
            raise RenderError("", f"could not start the render process: {error}",
                              subject=f"{self.subject} failed") from None
        finally:
            os.close(stdin)
            os.close(stdout)
        if _stopping.is_set():
            process.kill()
        unlink = interrupt.on_interrupt(process.kill) if interrupt is not None else None
        reader = threading.Thread(target=self._read_progress, args=(progress_pipe, progress), daemon=True,
                                  name="render-progress")
        reader.start()
        deadline = time.monotonic() + self.limits.wall_seconds
        finished = False
        try:
            try:
                with open(request_pipe, "wb") as request:
                    pickle.dump(self.request, request)
            except BrokenPipeError:
                pass  # the child died at once; its exit status tells why
            finished = process.wait(deadline)
        finally:  # past the deadline, and on any error here
            if unlink is not None:
                unlink()
            process.kill()
            process.wait()
            reader.join(timeout=5)
        if _stopping.is_set():
            raise RenderError("", "interrupted: the operator is stopping", subject=f"{self.subject} killed")
        if interrupt is not None and interrupt.reason is not None:
            raise RenderError("", f"interrupted: {interrupt.reason}", subject=f"{self.subject} killed")
        if not finished:
            raise RenderError("", self.limits.explain("wall"), subject=f"{self.subject} killed")
        if process.returncode is None:
            raise RenderError("", "the render fork server stopped during the render (see the operator's log); the "
                                  "next attempt starts it again", subject=f"{self.subject} failed")
        return self._answer(process.returncode)

    def _read_progress(self, pipe: int, progress: Callable[[RenderedApplication], None] | None) -> None:
        with open(pipe, "rb") as stdout:
            for line in iter(lambda: stdout.readline(_MAX_PROGRESS_LINE), b""):
                try:
                    event = json.loads(line)
                    app = RenderedApplication(str(event["name"]), event["mode"], [], float(event["seconds"]))
                except (ValueError, KeyError, TypeError):
                    continue
                if progress:
                    progress(app)

    def _answer(self, returncode: int) -> list[RenderedApplication]:
        if returncode < 0:
            raise self._killed_by(-returncode)
        if returncode == _EXIT_ANSWER_TOO_LARGE:
            raise RenderError("", f"the rendered objects {self.limits.explain('file size')}",
                              subject=f"{self.subject} failed")
        if returncode != 0:
            raise RenderError("", f"the render process exited with {returncode}: {self._stderr_tail()}",
                              subject=f"{self.subject} failed")
        answer_path = self.workdir / ANSWER_FILE
        try:
            if answer_path.stat().st_size > self.limits.file_bytes:
                raise ValueError("the answer is larger than the file-size limit")
            answer = json.loads(answer_path.read_bytes())
            if not isinstance(answer, dict):
                raise ValueError("the answer is not an object")
            self._relog(answer.get("log"))
            if "error" in answer:
                raise self._error(answer["error"])
            rendered = applications_from_json(answer.get("applications"))
            if [a.name for a in rendered] != [a.name for a in self.kfdef.applications]:
                raise ValueError("the answer does not hold the KfDef's applications in order")
            confinement = "; ".join(sorted({a.confinement for a in rendered if a.confinement}))
            log.info("%s: %d application(s) rendered; render helper: %s", self.subject, len(rendered),
                     confinement or "confinement not reported")
            return rendered
        except (OSError, ValueError, RecursionError) as error:
            raise RenderError("", f"unusable answer from the render process: {error}",
                              subject=f"{self.subject} failed") from None

    def _error(self, error: Any) -> RenderError:
        if not (isinstance(error, dict) and isinstance(error.get("message"), str)):
            raise ValueError("malformed error")
        message = error["message"]
        if error.get("limit") in RenderLimits.SETTINGS:
            message += f": {self.limits.explain(error['limit'])}"
        application = str(error["application"]) if isinstance(error.get("application"), str) else ""
        subject = error.get("subject") if isinstance(error.get("subject"), str) else None
        return RenderError(application, message, subject=subject or (None if application else self.subject))

    def _killed_by(self, signum: int) -> RenderError:
        subject = f"{self.subject} killed"
        if signum == signal.SIGXCPU:
            return RenderError("", self.limits.explain("cpu"), subject=subject)
        if signum == signal.SIGXFSZ:
            return RenderError("", self.limits.explain("file size"), subject=subject)
        if signum == signal.SIGKILL:
            return RenderError("", "SIGKILL, most likely from the kernel's out-of-memory killer: the operator's "
                                   "memory (its container limit) ran out during the render; raise that limit or lower "
                                   "KFDEF_RENDER_MEMORY", subject=subject)
        return RenderError("", f"the render process crashed with {signal_name(signum)}: {self._stderr_tail()}",
                           subject=f"{self.subject} failed")

    def _stderr_tail(self) -> str:
        try:
            with open(self.workdir / STDERR_FILE, "rb") as stream:
                stream.seek(max(0, stream.seek(0, os.SEEK_END) - 2000))
                lines = stream.read().decode(errors="replace").strip().splitlines()
        except OSError:
            lines = []
        return " | ".join(lines[-3:]) or "no output"

    def _relog(self, records: Any) -> None:
        for record in (records if isinstance(records, list) else [])[:_MAX_LOG_RECORDS]:
            if isinstance(record, list) and len(record) == 2 and all(isinstance(x, str) for x in record):
                log.log(logging.ERROR if record[0] == "ERROR" else logging.WARNING,
                        "%s: %s", self.subject, record[1][:2000])


def _environment(home: Path) -> dict[str, str]:
    """The whole environment of the fork server and of each render: where to find this package, a home of its
    own, nothing else."""
    return {"PATH": MINIMAL_PATH, "HOME": str(home), "TMPDIR": str(home), "LANG": "C.UTF-8",
            "PYTHONPATH": str(Path(__file__).resolve().parents[2]), "PYTHONDONTWRITEBYTECODE": "1"}


RENDER_ENTRY = f"{__name__}:main"
"""What each render process runs (:func:`main`): the fork server imports this module once, before its first fork."""

# Renders fork from that server; it exits a minute after the last render.
_FORK_SERVER = ForkServer(_environment(Path("/nonexistent")), RENDER_ENTRY)


# --- the child ---------------------------------------------------------------------------------------------------

_EXIT_NO_ANSWER = 3
_EXIT_ANSWER_TOO_LARGE = 4


def _limit_self(limits: RenderLimits) -> None:
    """Apply ``limits`` to this process (kustomize inherits them) and volunteer for the OOM killer."""
    for which, soft, hard in ((resource.RLIMIT_DATA, limits.memory_bytes, limits.memory_bytes),
                              (resource.RLIMIT_CPU, limits.cpu_seconds, limits.cpu_seconds + 5),
                              (resource.RLIMIT_FSIZE, limits.file_bytes, limits.file_bytes),
                              (resource.RLIMIT_CORE, 0, 0)):
        resource.setrlimit(which, (soft, hard))
    try:
        with open("/proc/self/oom_score_adj", "w") as adj:
            adj.write("1000")
    except OSError:
        pass  # not Linux, or /proc read-only: the rlimits still hold


class _Collect(logging.Handler):
    """Log records of the child, handed to the operator in the answer."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[list[str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        if len(self.records) < _MAX_LOG_RECORDS:
            self.records.append([record.levelname, record.getMessage()])


def _limit_hit(error: BaseException) -> str | None:
    """Which limit (a key of ``RenderLimits.SETTINGS``) ``error``, or what caused it, shows was exceeded."""
    cause: BaseException | None = error
    while cause is not None:
        if isinstance(cause, MemoryError):
            return "memory"
        if isinstance(cause, OSError) and cause.errno == errno.EFBIG:
            return "file size"
        if isinstance(cause, KustomizeError) and cause.limit:
            return cause.limit
        cause = cause.__cause__
    return None


def _progress(app: RenderedApplication) -> None:
    line = json.dumps({"name": app.name, "mode": app.mode, "seconds": app.seconds}) + "\n"
    sys.stdout.write(line)
    sys.stdout.flush()


def main() -> int:
    request: _Request = pickle.load(sys.stdin.buffer)  # written by the operator itself
    settings = request.settings
    _limit_self(settings.limits)
    collected = _Collect()
    logging.getLogger().addHandler(collected)
    answer: dict[str, Any]
    try:
        rendered = render(request.kfdef, request.sources, request.workdir, max_workers=settings.max_workers,
                          progress=_progress, timeout=settings.kustomize_timeout, helper=request.helper,
                          remote_bases=settings.remote_bases)
        answer = {"applications": applications_to_json(rendered)}
    except RenderError as error:
        answer = {"error": {"application": error.application, "message": error.message, "subject": error.subject,
                            "limit": _limit_hit(error)}}
    except (MemoryError, OSError) as error:
        answer = {"error": {"application": "", "message": f"failed: {type(error).__name__}: {error}",
                            "limit": _limit_hit(error)}}
    answer["log"] = collected.records
    try:
        with open(request.workdir / ANSWER_FILE, "w") as out:
            # dumps encodes in C, six times faster than dump (0.4 s for Kubeflow's render), but holds the whole
            # text in memory: that may hit the memory limit where the objects themselves fitted
            out.write(json.dumps(answer, separators=(",", ":")))
    except (OSError, MemoryError) as error:
        sys.stderr.write(f"cannot write the answer: {type(error).__name__}: {error}\n")
        return _EXIT_ANSWER_TOO_LARGE if getattr(error, "errno", None) == errno.EFBIG else _EXIT_NO_ANSWER
    return 0

