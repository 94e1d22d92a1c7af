"""``python -m scripts.bench.harness``: see the package's description (``--help``)."""

from __future__ import annotations

import sys

from .driver import main

sys.exit(main())
