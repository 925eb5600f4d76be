"""``python -m xsim``: the same as the ``xsim`` command."""

import sys

from .cli import main

sys.exit(main())
