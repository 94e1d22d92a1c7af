"""Phase ``main``: the preprocessing against its ceilings and its peer.

Once per run (one process each): the decode ceiling (nvImageCodec hardware decoders on threads, the
best 6-decoder row of :func:`scripts.bench.decode_grid.ceiling_grid`), DALI's in-process sweep (its best
reported) and tritonprep's executor in process. Per server setting: ``prep_sink`` (preprocess -> a sink
standing in for the network) and ``null_sink`` (the same shape with a preprocess that does no work: the
Python backend's own ceiling) through Triton at 1, 8, 32 and 64 images/request (``--points goals``:
prep_sink at 8 and 32 only), with the shipped GPU config unless ``--config`` overrides it; the larger image
sizes of ``--plan full``; and, with the first setting only, the CPU executor.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from scripts.bench import decode_grid

from ..external import one_process_row, run_dali, run_json_lines
from ..repos import make_repo
from ..run import Run
from ..settings import Setting

log = logging.getLogger("harness")

#: (images per request, concurrencies) measured for prep_sink and null_sink
MAIN_POINTS = [(1, [1, 16, 64, 128]), (8, [16, 64]), (32, [8, 16, 32]), (64, [4, 8])]
#: ``--points goals``: only what the goals read (prep_sink at 32 images/request, its best of three concurrencies: it
#: still rose from c=8 to c=16 on an H100; and at 8 beside it), no null_sink
GOAL_POINTS = {"prep_sink": [(8, [64]), (32, [8, 16, 32])]}
#: wall-clock limit of the in-process executor's benchmark (s)
INPROCESS_TIMEOUT_S = 300


def ceiling(run: Run) -> None:
    """1, 3, 6 decoders x (1 thread, no prealloc = the old ceiling; 1 thread, prealloc; default threads,
    prealloc), each in a fresh process, 1.5 s each; the ceiling is the best 6-decoder row."""
    grid = decode_grid.ceiling_grid(1.5)
    run.add_rows(
        [
            one_process_row(
                "decode_ceiling",
                f"nvImageCodec: {decode_grid.ceiling_label(g)}, on threads, batch {g['batch']}"
                + (f" (failed: {g['error']})" if g.get("error") else ""),
                g["batch"],
                g["decoders"],
                g["images_per_s"],
                decoders=g["decoders"],
                threads=g["threads"],
                prealloc=g["prealloc"],
            )
            for g in grid
        ]
    )
    best = decode_grid.ceiling_best(grid)
    if best is not None:
        run.summary["decode_ceiling_best"] = {**best, "config": decode_grid.ceiling_label(best)}
    run.save()


def dali(run: Run, extra: str) -> None:
    """The whole DALI sweep in one process (each configuration a fresh pipeline), every configuration a row."""
    res = run_dali(run.folders["500x375"], extra.split())
    run.summary["dali_500x375"] = res
    version = res.get("dali_version", "?")
    rows = []
    for r in res.get("all", []):
        note = f" (failed: {r['error']})" if r.get("error") else f" (not run: {r['skipped']})" if r.get(
            "skipped") else ""  # fmt: skip
        config = (f"DALI {version} in process: batch {r['batch']}, {r['threads']} threads, "
                  f"hw_decoder_load {r['hw_decoder_load']}, prefetch {r.get('prefetch', '?')}{note}")  # fmt: skip
        rows.append(one_process_row("dali", config, r["batch"], 1, r.get("images_per_s", 0),
                                    median_run_ms=r.get("median_run_ms", 0)))  # fmt: skip
    measured = [r for r in res.get("all", []) if "images_per_s" in r]
    failed = [r for r in res.get("all", []) if r.get("error")]
    if res.get("best"):
        run.summary["dali_best"] = {**res["best"], "swept": len(measured) + len(failed), "failed": len(failed),
                                    "dali_version": version}  # fmt: skip
        log.info("DALI best of %d configurations: %s", len(measured), res["best"])
    else:
        run.summary.pop("dali_best", None)
        log.error("DALI sweep: no configuration measured (%s)", res.get("error", "see the rows"))
    run.add_rows(rows)


def inprocess(run: Run) -> None:
    """tritonprep's GPU executor in one process, the DALI sweep's protocol: 1, 2 and 4 executors on threads."""
    cmd = [sys.executable, "-m", "scripts.bench.inprocess", "--images", str(run.folders["500x375"]), "--out", "{out}"]
    rows = [
        one_process_row(
            "executor_inprocess",
            r.get("config", "?") + (f" (failed: {r['error']})" if r.get("error") else ""),
            r.get("batch", 0),
            r.get("executors", 0),
            r.get("images_per_s", 0),
        )  # fmt: skip
        for r in run_json_lines(cmd, timeout=INPROCESS_TIMEOUT_S)
    ]
    run.add_rows(rows)


def once(run: Run, args: argparse.Namespace) -> None:
    """The one-process parts: decode ceiling, DALI, the executor in process."""
    if "ceiling" not in args.skip:
        ceiling(run)
    if "dali" not in args.skip:
        dali(run, args.dali_args)
    if "inprocess" not in args.skip:
        inprocess(run)


def config_overrides(config: tuple[int, int, int] | None) -> dict[str, int]:
    """``--config instances,queue_delay_us,hw_decoders`` (parsed by the driver) as :func:`~..repos.make_repo`
    arguments."""
    if not config:
        return {}
    n, delay, hw = config
    return {"instances": n, "queue_delay_us": delay, "hw_decoders": hw}


def served(run: Run, args: argparse.Namespace, setting: Setting) -> None:
    """prep_sink and null_sink at every point (and the other sizes), then the CPU executor (first setting only)."""
    repo = make_repo(run.work / "repo-main", **config_overrides(args.config))
    points = GOAL_POINTS if args.points == "goals" else {"prep_sink": MAIN_POINTS, "null_sink": MAIN_POINTS}
    with run.serve("main", repo, setting) as srv:
        for model, model_points in points.items():
            for n, conc in model_points:
                run.sweep(model, srv, model, [n], conc)
        if "sizes" not in args.skip:
            for size in run.plan["sizes"][1:]:
                run.sweep("prep_sink", srv, "prep_sink", [8], [16], size=size)
        run.summary["preprocess_instances"] = srv.log_lines("preprocess instance", 2)
    if "cpu" not in args.skip and setting == run.settings[0]:
        cores = os.cpu_count() or 1
        repo = make_repo(run.work / "repo-cpu", executor="cpu", instances=cores, cpu_threads=1)
        with run.serve("cpu", repo, setting) as srv:
            run.sweep(f"tritonprep CPU x{cores}", srv, "prep_sink", [8], [32, 64])
