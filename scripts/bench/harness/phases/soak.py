"""Phase ``soak``: constant load on ``prep_sink`` (8 images/request, c=64) for ``--soak-seconds``, GPU memory
and CuPy's pools sampled every 5 s (``soak_gpu_memory_mib``, ``soak_cupy_pool_bytes``)."""

from __future__ import annotations

import argparse
import time

from ..repos import make_repo
from ..run import Run
from ..settings import Setting


def served(run: Run, args: argparse.Namespace, setting: Setting) -> None:
    """Back-to-back perf_analyzer runs of ~30 s each, so the load is constant and the phase ends on time (one run
    over the whole duration waits for its stability windows and can overrun it)."""
    with run.serve("soak", make_repo(run.work / "repo-soak"), setting, period=5.0) as srv:
        deadline = time.monotonic() + args.soak_seconds
        while time.monotonic() < deadline:
            run.sweep(f"prep_sink soak {args.soak_seconds}s", srv, "prep_sink", [8], [64], kind="soak",
                      interval=10_000)  # fmt: skip
    record = srv.record  # its time series from the launch: keep the part from ready on, as seconds under load
    ready = record["ready_s"]
    loaded = [(round(t - ready, 1), mib) for t, mib in record["samples"] if t >= ready]
    run.summary[f"soak_gpu_memory_mib{setting.suffix}"] = [(0.0, record["baseline_mib"]), *loaded]
    run.summary[f"soak_cupy_pool_bytes{setting.suffix}"] = record["cupy_pool_bytes"]
    run.save()
