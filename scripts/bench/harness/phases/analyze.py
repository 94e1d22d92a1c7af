"""Phase ``analyze``: decode once, serve two models: the ``analyze`` ensemble (two specs, one decode) against
``classify`` + ``embed`` as two ensembles over the same images (:mod:`scripts.bench.decode_once`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from scripts.bench import decode_once

from ..repos import SOURCE, make_repo
from ..run import Run
from ..settings import Setting


def served(run: Run, args: argparse.Namespace, setting: Setting) -> None:
    """The comparison of :func:`scripts.bench.decode_once.compare` on one server."""
    repo = make_repo(run.work / "repo-analyze", with_classify=True)
    decode_once.add_models(repo, SOURCE)
    with run.serve("analyze", repo, setting) as srv:

        def sweep(model: str, batch: int, conc: int, perf_out: Path) -> list:
            return run.measure(srv, model, [batch], [conc], perf_out=perf_out)

        new, lines = decode_once.compare(sweep, decode_once.GRID[args.plan], run.out, "500x375")
    run.add_rows([{**r, **setting.row_fields(), "server": "analyze"} for r in new])
    run.summary.setdefault("decode_once", {})[setting.label] = lines
    run.save()
