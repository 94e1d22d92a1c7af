"""``python -m tritonprep.spec``: the parameter and provenance tables, as the docs show them."""

import sys

from . import parameter_table, provenance_table

sys.stdout.write(parameter_table() + "\n\n" + provenance_table() + "\n")
