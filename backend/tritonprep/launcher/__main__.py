"""``python -m tritonprep.launcher [serve] ...``: the same as ``tritonprep serve ...``."""

import sys

from .cli import main

sys.exit(main())
