"""``make demo`` as a user runs it: it starts with its own first line (no raw command), shows the KfDef with
``kubectl get`` and ``kubectl describe`` (Events included) and ``kfdef-operator diff``, and removes its
temporary directory."""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from tests.commands import ROOT

pytestmark = pytest.mark.cluster


def test_make_demo_reads_like_a_session_and_leaves_nothing_behind(tmp_path):
    done = subprocess.run(["make", "--no-print-directory", "demo"], cwd=ROOT, capture_output=True, text=True,
                          timeout=600, env={**os.environ, "TMPDIR": str(tmp_path)})
    out = done.stdout
    assert done.returncode == 0, out[-3000:] + done.stderr[-3000:]
    assert out.startswith("==> starting the embedded control plane"), out[:300]
    assert "netns-run" not in out and "KFDEF_K8SBIN" not in out
    assert "[applied " not in out  # progress lines are the Ready condition itself, nothing appended
    progress = out[out.index("==> creating namespace kubeflow"):out.index("$ kubectl get kfdef")].splitlines()[1:]
    assert all(re.fullmatch(r" +\d+\.\ds (waiting for status|Ready=False \((Progressing|FetchingSources|Rendering|"
                            r"Applying|WaitingForHealth)\): .+|Ready=True \(Ready\): all 10 objects applied and ready)",
                            line) for line in progress), progress
    assert progress[-1].endswith("Ready=True (Ready): all 10 objects applied and ready")
    table = out[out.index("$ kubectl get kfdef -n kubeflow\n"):].splitlines()[1:3]
    assert [line.split()[:5] for line in table] == [["NAME", "READY", "STATUS", "APPLIED", "TOTAL"],
                                                     ["demo", "True", "Ready", "10", "10"]]
    assert "$ kubectl get kfdef -n kubeflow -o wide\n" in out and "DEGRADED" in out
    described = out[out.index("$ kubectl describe kfdef demo -n kubeflow\n"):]
    assert re.search(r"Events:\n.*Normal\s+Healed\s+.*re-created Deployment.apps kubeflow/tf-job-operator", described,
                     re.S), described[:3000]
    assert "$ kfdef-operator diff kfdefs/demo/kfdef.yaml\n" in out and "no differences" in out
    assert out.rstrip().endswith("==> stopped the operator and the control plane")
    assert list(tmp_path.iterdir()) == []  # the demo's temporary directory is gone
