"""The soak scenario from the command line; the scenario itself is :mod:`tritonprep_testkit.soak`.

python -m scripts.soak --help
"""

from __future__ import annotations

import argparse
import sys

from tritonprep_testkit import soak as scenario
from tritonprep_testkit.loadgen import report


def main(argv: list[str] | None = None) -> int:
    """Soak, print the figures; exit 1 unless it passed."""
    args = scenario.add_arguments(argparse.ArgumentParser(description=scenario.__doc__.split("\n\n")[0])).parse_args(
        argv
    )
    figures = scenario.run(args)
    report(figures, args.json)
    return 0 if figures["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
