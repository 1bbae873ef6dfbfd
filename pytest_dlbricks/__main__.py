"""``python -m pytest_dlbricks``: see :mod:`pytest_dlbricks.wiring.cli`."""

import sys

from .wiring.cli import main

sys.exit(main())
