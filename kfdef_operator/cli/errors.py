"""Exit codes of ``kfdef-operator`` and the errors that end a command with one line on stderr."""

from __future__ import annotations

EXIT_OK = 0
#: ``build``, ``run``, ``uninstall``: the command could not do its job (a source, render or cluster failure).
EXIT_FAILED = 1
#: ``diff``: there are differences (kubectl diff's convention).
EXIT_DIFFERENCES = 1
#: ``status``: a KfDef shown is not Ready for its current generation.
EXIT_NOT_READY = 1
EXIT_BAD_INPUT = 2
#: ``diff``: the diff could not be computed (a source, render or cluster failure).
EXIT_DIFF_FAILED = 3
EXIT_INTERRUPTED = 130

EXIT_CODES_HELP = """\
exit codes:
  0    success; diff: no differences; status: Ready
  1    diff: differences found; status: not Ready; build, run, uninstall: failed (source, render or cluster
       error)
  2    bad input or usage: unreadable or invalid KfDef, unusable output path or kubeconfig, bad flags; status:
       any error (no such KfDef, cluster unreachable)
  3    diff: the diff could not be computed (source, render or cluster error)
  130  interrupted (Ctrl-C)
Errors are one line on stderr starting with 'error: '. See docs/cli.md."""


class BadInput(Exception):
    """The user's input cannot be used (exit 2); the message is the one-line reason."""


class Failed(Exception):
    """The command could not do its job (exit 1, or 3 for diff); the message is the one-line reason."""
