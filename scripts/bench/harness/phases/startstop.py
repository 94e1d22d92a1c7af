"""Phase ``startstop``: the default repository (``model_repository/`` as shipped, the launcher's defaults) started
``--starts`` times: launch to ready, the instances' start-up breakdown (their reports' ``timings``), GPU memory
at ready, the stop time, tritonserver's exit code and whether the watchdog had to kill anything (the server
records). The first start is also loaded (``classify`` and ``classify_fused`` at 8 images/request, c=64;
``analyze`` at 8, c=16; ``--skip load`` leaves it idle) for the peak memory under load."""

from __future__ import annotations

import argparse

from ..repos import SOURCE
from ..run import Run
from ..settings import Setting

#: (model, images per request, concurrency) of the load on the first start
LOAD = [("classify", 8, 64), ("classify_fused", 8, 64), ("analyze", 8, 16)]


def served(run: Run, args: argparse.Namespace, setting: Setting) -> None:
    """``--starts`` starts and stops of the default repository, the first one under load."""
    for i in range(1, args.starts + 1):
        with run.serve(f"startstop-{i}", SOURCE, setting, options={}) as srv:
            if i == 1 and "load" not in args.skip:
                srv.record["loaded"] = True
                for model, batch, conc in LOAD:
                    run.sweep(model, srv, model, [batch], [conc], kind="startstop")
