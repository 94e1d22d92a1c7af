"""The overload scenarios from the command line; the scenarios themselves are :mod:`tritonprep_testkit.overload`
(open loop at a multiple of the capacity) and :mod:`tritonprep_testkit.overload_sweep` (closed loop at 1, 2, 4, 8
times the saturating concurrency: ``sweep``).

python -m scripts.overload --help
python -m scripts.overload sweep --help
"""

from __future__ import annotations

import argparse
import logging
import sys

from tritonprep_testkit import overload as scenario
from tritonprep_testkit import overload_sweep
from tritonprep_testkit.loadgen import report


def main(argv: list[str] | None = None) -> int:
    """Measure capacity, overload, print the figures (``sweep``: the closed-loop sweep's)."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["sweep"]:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
        parser = argparse.ArgumentParser(prog="python -m scripts.overload sweep",
                                         description=overload_sweep.__doc__.split("\n\n")[0])  # fmt: skip
        args = overload_sweep.add_arguments(parser).parse_args(argv[1:])
        report(overload_sweep.run(args), args.json)
        return 0
    args = scenario.add_arguments(argparse.ArgumentParser(description=scenario.__doc__.split("\n\n")[0])).parse_args(
        argv
    )
    figures = scenario.run(args)
    report(figures, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
