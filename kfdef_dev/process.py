"""The operator as a separate process, started exactly as in production (``kfdef-operator run``).

Used by the demo, the benchmarks and the tests; the benchmarks and the tests run :class:`LocalSourcesOperator`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from kfdef_dev.controlplane import free_port, stop_process


class OperatorProcess:
    """One ``kfdef-operator run`` process with its own log file, probe port and work directory."""

    def __init__(self, kubeconfig: Path, work_dir: Path, *, extra_args: tuple[str, ...] = (),
                 env: dict[str, str] | None = None, wrapper: tuple[str, ...] = ()) -> None:
        self.kubeconfig = kubeconfig
        self.work_dir = work_dir
        self.extra_args = extra_args
        self.wrapper = wrapper  # a command that execs the rest in place (the PID stays the operator's)
        self.env = {**os.environ, **(env or {})}
        self.port = free_port()
        self.log_path = work_dir / "operator.log"
        self.popen: subprocess.Popen | None = None
        work_dir.mkdir(parents=True, exist_ok=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> None:
        log = open(self.log_path, "ab")
        self.popen = subprocess.Popen(
            [*self.wrapper, sys.executable, "-m", "kfdef_operator", "run", "--kubeconfig", str(self.kubeconfig),
             "--server-address", f"127.0.0.1:{self.port}", "--work-dir", str(self.work_dir / "cache"),
             *self.extra_args],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=self.env, start_new_session=True)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.popen.poll() is not None:
                raise RuntimeError(f"operator exited with {self.popen.returncode}:\n{self.log_tail()}")
            if self.http_get("/readyz") is not None:
                return
            time.sleep(0.05)
        raise RuntimeError(f"operator not ready after {timeout:.0f}s:\n{self.log_tail()}")

    def http_get(self, path: str) -> str | None:
        try:
            with urllib.request.urlopen(self.url + path, timeout=5) as response:
                return response.read().decode()
        except (urllib.error.URLError, OSError):
            return None

    def metrics(self) -> dict[str, float]:
        """Samples of the /metrics page as {'name{labels}': value}."""
        samples = {}
        for line in (self.http_get("/metrics") or "").splitlines():
            if line and not line.startswith("#"):
                key, _, value = line.rpartition(" ")
                samples[key] = float(value)
        return samples

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20.0) -> None:
        if self.popen is not None:
            stop_process(self.popen, sig, timeout)
        self.popen = None

    def kill(self) -> None:
        """SIGKILL: no cleanup at all, as when a node dies."""
        self.stop(signal.SIGKILL)

    def restart(self) -> None:
        self.stop()
        self.start()

    def log_tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


class LocalSourcesOperator(OperatorProcess):
    """The operator trusting sources on this machine, each setting explicit (the production defaults refuse all
    three): plain http (``KFDEF_ALLOW_INSECURE_HTTP``) from loopback (``KFDEF_ALLOWED_SOURCE_NETWORKS``), where the
    tests and benchmarks serve tarballs, and local sources under ``local_source_roots``
    (``KFDEF_LOCAL_SOURCE_ROOTS``; default: the directory holding ``work_dir``, in which the caller writes its
    stacks; the operator never reads its own work directory as a source)."""

    def __init__(self, kubeconfig: Path, work_dir: Path, *, extra_args: tuple[str, ...] = (),
                 env: dict[str, str] | None = None, local_source_roots: tuple[Path, ...] | None = None,
                 wrapper: tuple[str, ...] = ()) -> None:
        roots = local_source_roots if local_source_roots is not None else (work_dir.parent,)
        super().__init__(kubeconfig, work_dir, extra_args=extra_args,
                         env={"KFDEF_ALLOW_INSECURE_HTTP": "1", "KFDEF_ALLOWED_SOURCE_NETWORKS": "127.0.0.0/8",
                              "KFDEF_LOCAL_SOURCE_ROOTS": os.pathsep.join(str(r) for r in roots), **(env or {})},
                         wrapper=wrapper)
