"""``python -m pytest_dlbricks``: see :mod:`pytest_dlbricks.cli`."""

import sys

from .cli import main

sys.exit(main())
