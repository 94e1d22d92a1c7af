"""Phase ``fused``: ``classify_fused`` with each instance count of ``--fused-instances`` (its own server each):
throughput at 8 and 32 images/request, c=1 latency, memory (the server records)."""

from __future__ import annotations

import argparse

from ..repos import make_repo
from ..run import Run
from ..settings import Setting

#: classify_fused instance counts: (images per request, concurrencies)
FUSED_TUNE_POINTS = [(1, [1]), (8, [64]), (32, [16])]


def served(run: Run, args: argparse.Namespace, setting: Setting) -> None:
    """One server per instance count."""
    for n in (int(v) for v in args.fused_instances.split(",")):
        repo = make_repo(run.work / f"repo-fused-x{n}", with_classify=True, counts={"classify_fused": n})
        with run.serve(f"fused-x{n}", repo, setting) as srv:
            for b, conc in FUSED_TUNE_POINTS:
                run.sweep(f"classify_fused x{n}", srv, "classify_fused", [b], conc, kind="fused_tune")
