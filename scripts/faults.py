"""The faults scenario from the command line; the scenario itself is :mod:`tritonprep_testkit.faults`.

python -m scripts.faults --help
"""

from __future__ import annotations

import argparse
import logging
import sys

from tritonprep_testkit import faults as scenario
from tritonprep_testkit.loadgen import report


def main(argv: list[str] | None = None) -> int:
    """Run one fault scenario and print its figures."""
    args = scenario.add_arguments(argparse.ArgumentParser(description=scenario.__doc__.split("\n\n")[0])).parse_args(
        argv
    )
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
    figures = scenario.run(args)
    report(figures, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
