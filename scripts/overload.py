"""The overload scenario from the command line; the scenario itself is :mod:`tritonprep_testkit.overload`.

python -m scripts.overload --help
"""

from __future__ import annotations

import argparse
import sys

from tritonprep_testkit import overload as scenario
from tritonprep_testkit.loadgen import report


def main(argv: list[str] | None = None) -> int:
    """Measure capacity, overload, print the figures."""
    args = scenario.add_arguments(argparse.ArgumentParser(description=scenario.__doc__.split("\n\n")[0])).parse_args(
        argv
    )
    figures = scenario.run(args)
    report(figures, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
