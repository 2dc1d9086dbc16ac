"""``kfdef-operator run`` against a cluster it cannot use: one line and an exit code, not a traceback and retries.

The cases that need an API server (credentials refused, KfDef CRD missing) are in tests/cluster/test_cli.py.
"""

from __future__ import annotations

import inspect
import logging
from pathlib import Path

import kopf
import kopf._cogs.clients.api as kopf_api
import pytest

from kfdef_dev.controlplane import free_port
from kfdef_operator.cli.main import _fail
from kfdef_operator.controller import runner
from kfdef_operator.controller.log_filters import RetriedThrottling
from kfdef_operator.controller.preflight import ClusterError
from tests.commands import kfdef_operator


def kubeconfig(path: Path, server: str) -> Path:
    path.write_text(f"""apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: "{server}", insecure-skip-tls-verify: true}}}}]
users: [{{name: u, user: {{token: not-a-token}}}}]
contexts: [{{name: x, context: {{cluster: c, user: u}}}}]
current-context: x
""")
    return path


def empty(path: Path) -> Path:
    path.write_text("")
    return path


@pytest.mark.parametrize("make, code, message", [
    (lambda tmp: tmp / "missing", 2, "does not exist (pass --kubeconfig FILE or set KUBECONFIG)"),
    (lambda tmp: tmp, 2, "is not a file"),
    (lambda tmp: empty(tmp / "empty"), 2, "defines no cluster"),
    (lambda tmp: kubeconfig(tmp / "closed", f"https://127.0.0.1:{free_port()}"), 1,
     "cannot reach the API server at https://127.0.0.1:"),
])
def test_run_with_an_unusable_cluster_exits_with_one_line(tmp_path, make, code, message):
    done = kfdef_operator("run", "--kubeconfig", str(make(tmp_path)), "--server-address", "", timeout=60)
    assert done.returncode == code, done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: ") and message in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_the_throttling_kopf_retries_is_not_an_error():
    # kopf's own words for a request it retries (kept in step with the installed kopf by the next assertion).
    assert 'logger.error(f"Request attempt {idx} failed; will retry: {what} -> {e!r}")' in inspect.getsource(
        kopf_api.request)
    record = logging.LogRecord("kopf._cogs.clients.watching", logging.ERROR, __file__, 1,
                               "Request attempt #1/9 failed; will retry: GET https://h/apis/kfdef.apps.kubeflow.org/"
                               "v1/kfdefs -> APITooManyRequestsError('storage is (re)initializing', {})", None, None)
    assert RetriedThrottling().filter(record) and (record.levelno, record.levelname) == (logging.INFO, "INFO")
    escalated = logging.LogRecord("kopf._cogs.clients.watching", logging.ERROR, __file__, 1,
                                  "Request attempt #9/9 failed; escalating: GET https://h/ -> "
                                  "APITooManyRequestsError('storage is (re)initializing', {})", None, None)
    assert RetriedThrottling().filter(escalated) and escalated.levelno == logging.ERROR


def test_credentials_revoked_while_running_end_the_operator_with_what_happened(monkeypatch, capsys):
    """OLM's uninstall deletes the operator's ServiceAccount while its pods shut down: every token of it stops
    working, and kopf gives up with a LoginError. The operator says so (it once called it a bug of its own)."""
    async def kopf_out_of_credentials(**_: object) -> None:
        raise kopf.LoginError("Ran out of valid credentials. Consider installing an API client library or adding a "
                              "login handler. See more: https://docs.kopf.dev/en/stable/authentication/")
    monkeypatch.setattr(kopf, "operator", kopf_out_of_credentials)
    with pytest.raises(ClusterError) as raised:
        runner.serve(kopf.Memo(), frozenset(), "/etc/operator/kubeconfig")
    assert _fail(str(raised.value), 1) == 1
    line = capsys.readouterr().err
    assert line.count("\n") == 1 and line.startswith(
        "error: the API server stopped accepting the credentials from kubeconfig /etc/operator/kubeconfig "
        "(401 Unauthorized; Ran out of valid credentials): a ServiceAccount's token is revoked when"), line
    assert "bug" not in line and "kopf.dev" not in line
