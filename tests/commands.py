"""Commands as a user types them: ``kfdef-operator ...`` and ``kubectl ...`` as processes of their own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def kfdef_operator(*args: str, kubeconfig: Path | None = None, timeout: float = 180, stdin: str | None = None,
                   cwd: Path = ROOT) -> subprocess.CompletedProcess:
    """``kfdef-operator ARGS`` (the package's entry point) with ``KUBECONFIG`` set as a user's shell would."""
    env = {**os.environ, **({"KUBECONFIG": str(kubeconfig)} if kubeconfig else {})}
    return subprocess.run([sys.executable, "-m", "kfdef_operator", *args], capture_output=True, text=True, env=env,
                          input=stdin, stdin=None if stdin is not None else subprocess.DEVNULL, timeout=timeout,
                          cwd=cwd)


def kubectl(bin_dir: Path, kubeconfig: Path, *args: str, stdin: str | None = None,
            check: bool = True) -> subprocess.CompletedProcess:
    """``kubectl --kubeconfig KUBECONFIG ARGS``; fails the test with kubectl's stderr unless ``check`` is off."""
    result = subprocess.run([bin_dir / "kubectl", "--kubeconfig", kubeconfig, *args], input=stdin,
                            capture_output=True, text=True, timeout=60)
    if check and result.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed:\n{result.stderr}")
    return result
