"""``python -m kfdef_operator`` is the ``kfdef-operator`` command."""

import sys

from .cli import main

sys.exit(main())
