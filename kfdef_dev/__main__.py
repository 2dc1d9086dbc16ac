"""``python -m kfdef_dev demo`` (the main job of ``make demo``) and ``python -m kfdef_dev stacks`` (the release
archives ``make test`` and ``make bench`` hand to the tests)."""

import argparse
import sys

from kfdef_dev.demo import register_demo
from kfdef_dev.stacks import register_stacks


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m kfdef_dev", description="kfdef-operator development tools")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    register_demo(subparsers)
    register_stacks(subparsers)
    args = parser.parse_args()
    return int(args.handler(args))


sys.exit(main())
