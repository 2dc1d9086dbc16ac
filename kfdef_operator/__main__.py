"""``python -m kfdef_operator`` is the ``kfdef-operator`` command."""

import sys

from kfdef_operator.cli.main import main

sys.exit(main())
