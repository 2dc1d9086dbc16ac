"""``kfdef-operator`` command line.

Each subcommand lives in one ``register_<name>(subparsers)`` function that adds its parser and sets
``handler`` (a function ``(args) -> exit code``); ``SUBCOMMANDS`` lists them. To add a subcommand, write
its register function and append it there.

Exit codes are listed in :mod:`kfdef_operator.cli.errors` (and ``--help``). Every failure prints one
line ``error: <reason>`` on stderr, never a traceback; an unexpected exception says it is a bug.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from kfdef_operator import __version__
from kfdef_operator.api.kfdef import InvalidKfDef
from kfdef_operator.build.kustomize import KustomizeError
from kfdef_operator.build.render import RenderError
from kfdef_operator.cli.build import register_build
from kfdef_operator.cli.diff import register_diff
from kfdef_operator.cli.errors import EXIT_BAD_INPUT, EXIT_CODES_HELP, EXIT_FAILED, EXIT_INTERRUPTED, BadInput, Failed
from kfdef_operator.cli.status import register_status
from kfdef_operator.cli.uninstall import register_uninstall
from kfdef_operator.controller.preflight import ClusterError
from kfdef_operator.controller.runner import register_run
from kfdef_operator.source.errors import SourceError

Handler = Callable[[argparse.Namespace], int]

SUBCOMMANDS: list[Callable[[argparse._SubParsersAction], None]] = [register_build, register_diff, register_run,
                                                                   register_status, register_uninstall]


class _Parser(argparse.ArgumentParser):
    """Usage errors as one ``error:`` line (exit 2), like every other bad input."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_BAD_INPUT, f"error: {message} (see {self.prog} --help)\n")


def make_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="kfdef-operator", description="Deploy, render and compare KfDef resources.",
                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EXIT_CODES_HELP)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=_Parser)
    for register in SUBCOMMANDS:
        register(subparsers)
    for command in subparsers.choices.values():  # every --help ends with the exit codes
        command.formatter_class, command.epilog = argparse.RawDescriptionHelpFormatter, EXIT_CODES_HELP
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = make_parser().parse_args(argv)
    except SystemExit as exc:  # --help, --version and usage errors (already printed)
        return exc.code if isinstance(exc.code, int) else EXIT_BAD_INPUT
    handler: Handler = args.handler
    failed = getattr(args, "failure_exit", EXIT_FAILED)
    try:
        return handler(args)
    except (BadInput, InvalidKfDef) as exc:
        return _fail(str(exc), EXIT_BAD_INPUT)
    except ClusterError as exc:
        return _fail(str(exc), EXIT_BAD_INPUT if exc.usage else failed)
    except (Failed, SourceError, RenderError, KustomizeError) as exc:
        return _fail(str(exc), failed)
    except KeyboardInterrupt:
        return _fail("interrupted", EXIT_INTERRUPTED)
    except BrokenPipeError:  # `kfdef-operator build ... | head`: the reader left; nothing to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at interpreter exit
        return failed
    except Exception as exc:  # a bug: still one line, with what is needed to report it
        return _fail(f"unexpected {type(exc).__name__}: {exc} (a bug in kfdef-operator {__version__}; please "
                     "report it with the command that caused it)", failed)


def _fail(message: str, code: int) -> int:
    sys.stderr.write("error: " + " | ".join(line.strip() for line in message.splitlines() if line.strip()) + "\n")
    return code


if __name__ == "__main__":
    sys.exit(main())
