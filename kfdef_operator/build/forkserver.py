"""A fork server for render processes: one Python process with the render code imported forks each render.

Starting a render as a new interpreter cost about 0.2 s of CPU before it read its request, mostly imports: more
than the render itself for a small KfDef, and 300 KfDefs of a fleet spent a minute of CPU on it. The server
(``python -P -m kfdef_operator.build.forkserver FD ENTRY``) imports the module of its entry point once, then forks a
fresh process per render that runs the entry point, as ``multiprocessing``'s forkserver does. The caller names the
entry point (``module:function``, the function returning the exit code), so this module imports no render code.
Each render is still a process of its own, in its own session, with its own limits and environment, started from a
process that never saw a KfDef: what one render does cannot reach the next.

The operator talks to the server over a socket pair that only the two of them hold (render processes close their
copy at once), so nothing a render runs can ask the server for anything. Messages are JSON, one per datagram; the
operator passes the render's stdin, stdout and stderr along as file descriptors.

- ``{"spawn": N, "cwd": ..., "env": {...}}`` with three descriptors: the server forks; it answers
  ``{"spawned": N, "pid": P}`` (or ``{"spawned": N, "error": ...}``).
- ``{"kill": P}``: the server kills render P's process group, if P has not been reaped yet.
- ``{"exited": P, "returncode": R}``: render P ended (R negative: killed by signal -R). Before reaping it the
  server killed its process group, so nothing it started outlives it; a process group is only ever killed while
  its leader is unreaped, so its number cannot belong to anyone else yet.

When the operator closes its end (it stops, dies, or the server was idle for ``idle_seconds``) the server kills
every render it started and exits. If the server dies, its renders die with it (``PR_SET_PDEATHSIG``), and the
renders in progress fail with :class:`ForkServerError`; the next render starts a new server.
"""

from __future__ import annotations

import ctypes
import importlib
import itertools
import json
import logging
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

log = logging.getLogger(__name__)

_MAX_MESSAGE = 64 * 1024
_PR_SET_PDEATHSIG = 1
_SPAWN_TIMEOUT_S = 60.0
_LIBC = ctypes.CDLL(None, use_errno=True)


class ForkServerError(RuntimeError):
    """The fork server could not be started, or stopped while a render was starting or running."""


class ForkedProcess:
    """A render process forked by the server; :meth:`wait` for it, :meth:`kill` its process group."""

    def __init__(self, server: _Server, pid: int) -> None:
        self.pid = pid
        self._server = server
        self._exited = threading.Event()
        self.returncode: int | None = None  # None after exit: the server stopped, the status is unknown

    def wait(self, deadline: float | None = None) -> bool:
        """Wait until the process exited or the ``time.monotonic()`` ``deadline`` passed; True when it exited."""
        timeout = None if deadline is None else max(deadline - time.monotonic(), 0.0)
        return self._exited.wait(timeout)

    def kill(self) -> None:
        """SIGKILL its whole process group (nothing happens once it has exited)."""
        if not self._exited.is_set() and not self._server.closed:
            try:
                self._server.send({"kill": self.pid})
            except OSError:
                pass  # the server is gone, and this render with it

    def ended(self, returncode: int | None) -> None:
        self.returncode = returncode
        self._exited.set()


@dataclass
class _Server:
    """One server process and what it has not answered yet: a server that ends fails only its own renders."""

    connection: socket.socket
    process: subprocess.Popen
    starting: dict[int, tuple[threading.Event, list[ForkedProcess | str]]] = field(default_factory=dict)
    running: dict[int, ForkedProcess] = field(default_factory=dict)
    closed: bool = False

    def busy(self) -> bool:
        return bool(self.starting or self.running)

    def send(self, message: dict[str, Any], descriptors: tuple[int, ...] = ()) -> None:
        socket.send_fds(self.connection, [json.dumps(message).encode()], list(descriptors))

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.connection.shutdown(socket.SHUT_RDWR)  # wakes our reader; the server sees the end of its socket


class ForkServer:
    """The operator's side: starts the server on the first :meth:`spawn`, and stops it after ``idle_seconds``
    without a render. ``entry`` is what each forked process runs, ``module:function``: the server imports the module
    before it forks anything, and the function (no arguments) returns the process's exit code."""

    def __init__(self, environment: Mapping[str, str], entry: str, idle_seconds: float = 60.0) -> None:
        self._environment = dict(environment)
        self._entry = entry
        self.idle_seconds = idle_seconds
        self._lock = threading.Lock()
        self._server: _Server | None = None
        self._numbers = itertools.count(1)

    @property
    def pid(self) -> int | None:
        """The server's pid while it runs."""
        with self._lock:
            return self._server.process.pid if self._server is not None else None

    def spawn(self, cwd: Path, env: Mapping[str, str], stdio: tuple[int, int, int]) -> ForkedProcess:
        """Fork a render with ``stdio`` as its stdin, stdout and stderr (the caller closes its copies)."""
        started, answer = threading.Event(), list[ForkedProcess | str]()
        with self._lock:
            server = self._server or self._start()
            number = next(self._numbers)
            server.starting[number] = (started, answer)
            try:
                server.send({"spawn": number, "cwd": str(cwd), "env": dict(env)}, stdio)
            except OSError as error:
                del server.starting[number]
                raise ForkServerError(f"the render fork server is gone: {error}") from None
        if not started.wait(_SPAWN_TIMEOUT_S):
            with self._lock:
                server.starting.pop(number, None)
            raise ForkServerError(f"the render fork server did not answer within {_SPAWN_TIMEOUT_S:g} s")
        if not answer:
            raise ForkServerError("the render fork server stopped")
        if isinstance(answer[0], str):
            raise ForkServerError(f"the render fork server: {answer[0]}")
        return answer[0]

    def close(self) -> None:
        """Stop the server: it kills every render it started and exits; those renders fail."""
        with self._lock:
            server, self._server = self._server, None
            if server is not None:
                server.close()
        if server is not None:
            server.process.wait()

    def _start(self) -> _Server:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            process = subprocess.Popen(
                [sys.executable, "-P", "-m", __name__, str(theirs.fileno()), self._entry], stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, env=self._environment, cwd="/", start_new_session=True,
                pass_fds=(theirs.fileno(),))
        except OSError as error:
            ours.close()
            raise ForkServerError(f"could not start the render fork server: {error}") from None
        finally:
            theirs.close()
        self._server = _Server(ours, process)
        threading.Thread(target=self._read, args=(self._server,), daemon=True, name="render-fork-server").start()
        log.debug("render fork server started (pid %d)", process.pid)
        return self._server

    def _read(self, server: _Server) -> None:
        """Dispatch the server's answers until it ends; then fail whatever it had not finished."""
        try:
            while True:
                with self._lock:
                    idle = not server.busy()
                if not select.select([server.connection], [], [], self.idle_seconds if idle else None)[0]:
                    with self._lock:
                        if self._server is server and not server.busy():
                            self._server = None
                            server.close()
                            log.debug("render fork server stopped after %g s without a render", self.idle_seconds)
                    continue
                data = server.connection.recv(_MAX_MESSAGE)
                if not data:
                    break
                self._dispatch(server, json.loads(data))
        except (OSError, ValueError) as error:
            log.warning("the render fork server's socket failed: %s", error)
        with self._lock:
            if self._server is server:
                self._server = None
                server.close()
                log.warning("the render fork server (pid %d) stopped unexpectedly; renders in progress fail, the "
                            "next render starts it again", server.process.pid)
            server.closed = True
            starting, running = list(server.starting.values()), list(server.running.values())
            server.starting.clear()
            server.running.clear()
        for started, _ in starting:
            started.set()
        for forked in running:
            forked.ended(None)
        server.connection.close()
        server.process.wait()

    def _dispatch(self, server: _Server, message: dict[str, Any]) -> None:
        with self._lock:
            if "spawned" in message:
                started, answer = server.starting.pop(message["spawned"], (None, []))
                if "pid" in message:
                    forked = ForkedProcess(server, int(message["pid"]))
                    server.running[forked.pid] = forked
                    answer.append(forked)
                else:
                    answer.append(str(message.get("error")))
                if started is not None:
                    started.set()
                return
            ended = server.running.pop(int(message["exited"]), None)
        if ended is not None:
            ended.ended(int(message["returncode"]))


# --- the server ----------------------------------------------------------------------------------------------------

def serve(connection: socket.socket, entry: str) -> None:
    """Fork renders running ``entry`` (``module:function``) on request until the operator closes its end; then
    kill them all and return."""
    module, _, function = entry.partition(":")
    run: Callable[[], int] = getattr(importlib.import_module(module), function)  # the preload, once

    children: dict[int, int] = {}  # pidfd -> pid, for every render not yet reaped
    try:
        while True:
            readable = select.select([connection.fileno(), *children], [], [])[0]
            for pidfd in readable:
                if pidfd in children:
                    _reap(connection, pidfd, children.pop(pidfd))
            if connection.fileno() in readable:
                message, descriptors, _, _ = socket.recv_fds(connection, _MAX_MESSAGE, 3)
                try:
                    if not message:
                        return
                    request = json.loads(message)
                    if "spawn" in request:
                        _spawn(connection, request, descriptors, children, run)
                    elif request.get("kill") in children.values():
                        _kill_group(int(request["kill"]))
                finally:
                    for descriptor in descriptors:
                        os.close(descriptor)
    finally:
        for pid in children.values():
            _kill_group(pid)
        for pidfd, pid in children.items():
            os.waitpid(pid, 0)
            os.close(pidfd)


def _spawn(connection: socket.socket, request: dict[str, Any], descriptors: list[int], children: dict[int, int],
           run: Callable[[], int]) -> None:
    try:
        if len(descriptors) != 3:
            raise ValueError(f"expected stdin, stdout and stderr, got {len(descriptors)} descriptors")
        sys.stderr.flush()
        server = os.getpid()
        pid = os.fork()
        if pid == 0:
            _become_render(request, descriptors, server, run)
        try:
            children[os.pidfd_open(pid)] = pid
        except OSError as error:  # a render nobody watches must not run: stop it at once
            _kill_group(pid)
            os.kill(pid, signal.SIGKILL)  # also before its setsid
            os.waitpid(pid, 0)
            raise OSError(f"cannot watch the forked render, so it was stopped: pidfd_open failed ({error}); the "
                          "render fork server needs Linux 5.3 or later") from None
        answer: dict[str, Any] = {"spawned": request["spawn"], "pid": pid}
    except (OSError, ValueError) as error:
        answer = {"spawned": request["spawn"], "error": str(error)}
    connection.send(json.dumps(answer).encode())


def _reap(connection: socket.socket, pidfd: int, pid: int) -> None:
    _kill_group(pid)  # what the render started (git of a killed kustomize), while the group's number is still its
    _, status = os.waitpid(pid, 0)
    os.close(pidfd)
    connection.send(json.dumps({"exited": pid, "returncode": os.waitstatus_to_exitcode(status)}).encode())


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _become_render(request: dict[str, Any], descriptors: list[int], server: int, run: Callable[[], int]) -> NoReturn:
    """In the forked child: a session of its own, dying with the server, the given stdio, cwd and environment,
    none of the server's descriptors; then the render, ``run``."""
    code = 1
    try:
        os.setsid()
        _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != server:  # the server died before prctl took effect
            os._exit(code)
        for target, descriptor in enumerate(descriptors):
            os.dup2(descriptor, target)
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        tempfile.tempdir = None
        code = run()
    except SystemExit as end:
        code = end.code if isinstance(end.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(code)


if __name__ == "__main__":
    serve(socket.socket(fileno=int(sys.argv[1])), sys.argv[2])
