"""Phase ``tune``: preprocess configurations (instances, queue delay, hardware decoders per instance) through
Triton, each with the null ceiling beside it (``--skip null`` leaves it out), at 1, 8 and 32 images/request; the
best (by prep_sink's images/s summed over the points) goes to ``best<setting>.json`` and
``summary["tuned_config<setting>"]``. ``--tune-grid`` replaces :data:`TUNE_GRID`, e.g. to weigh fewer
instances with more hardware decoders each (a model's instances are unloaded one after another, 1 s or more
each on Triton 2.51's Python backend, so the instance count bounds the stop)."""

from __future__ import annotations

import argparse
import json

from ..repos import make_repo
from ..run import Run
from ..settings import Setting

#: (preprocess instances, queue delay us, hardware decoders per instance)
TUNE_GRID = [(2, 0, 2), (4, 0, 1), (4, 0, 2), (6, 0, 2)]
#: (images per request, concurrency) of each configuration
TUNE_POINTS = [(1, 128), (8, 64), (32, 16)]


def served(run: Run, args: argparse.Namespace, setting: Setting) -> None:
    """One server per configuration of :data:`TUNE_GRID`."""
    best: tuple[float, tuple] | None = None
    for cfg in args.tune_grid or TUNE_GRID:
        n, delay, hw = cfg
        repo = make_repo(run.work / f"repo-tune-{n}-{delay}-{hw}", instances=n, queue_delay_us=delay, hw_decoders=hw)
        with run.serve(f"tune-{n}-{delay}-{hw}", repo, setting) as srv:
            score = 0.0
            for batch, conc in TUNE_POINTS:
                new = run.sweep(f"prep_sink x{n} delay {delay}us hw_decoders {hw}", srv, "prep_sink", [batch],
                                [conc], kind="tune", interval=1500)  # fmt: skip
                score += sum(r["images_per_s"] for r in new)
            for batch, conc in TUNE_POINTS if "null" not in args.skip else []:
                run.sweep(f"null_sink x{n} delay {delay}us", srv, "null_sink", [batch], [conc], kind="tune",
                          interval=1500)  # fmt: skip
        if best is None or score > best[0]:
            best = (score, cfg)
    if best:
        (run.out / f"best{setting.suffix}.json").write_text(json.dumps(list(best[1])))
        run.summary[f"tuned_config{setting.suffix}"] = best[1]
        run.save()
