"""Phase ``overload`` (issue 38): ``classify`` closed-loop at 1, 2, 4 and 8 times its saturating concurrency, at 8
and 32 images/request, on the shipped repository as shipped (its queues and timeouts: how it refuses is what is
measured).

The sweep (:mod:`tritonprep_testkit.overload_sweep`): the saturating concurrency searched (1, 2, 4, ... until the
images/s stop growing by 5 %), then each factor for 10 s after a 2 s warm-up, a refused client backing off 3 ms;
the clients are threads of several processes (half the cores, at most 8). A row per point: images/s answered right
and against the 1x point, requests answered right, refused for overload and failed otherwise (by category, a
message each), p50/p99 of the answered ones and the p99 against the 1x point's, the E and W lines of the server's
log meanwhile and the servers' peak resident memory. The report's "Overload" section
(:mod:`..overload_report`) puts them in a table per request size, with the goals.

On one GPU by default; ``--gpu-counts 1,2`` sweeps the shipped repository on GPUs 0..N-1 for each count (a
tritonserver per GPU on shared ports, as deployed; the rows' setting says ``N GPUs``).
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from tritonprep_testkit import overload_sweep
from tritonprep_testkit.loadgen import memory

from ..repos import shipped_copy
from ..run import Run
from ..settings import Setting, parse_counts

#: images per request of the sweeps
SIZES = (8, 32)
#: the sweep's plan on the GPU machine
PLAN = overload_sweep.Plan(factors=(1, 2, 4, 8), seconds=10.0, warmup_s=2.0, search_seconds=4.0, search_warmup_s=1.0,
                           processes=max(1, min(8, (os.cpu_count() or 2) // 2)))  # fmt: skip
#: what the report reads of a sweep, beside its rows (in ``summary["overload"]``, by setting and request size)
SWEEP_KEYS = ("saturating_concurrency", "search", "search_log_lines", "search_other", "ready_after",
              "answered_after", "log_after", "problems")  # fmt: skip


def rows_of(figures: dict[str, Any], fields: dict[str, Any]) -> list[dict[str, Any]]:
    """A row per point of a sweep's figures (:meth:`~tritonprep_testkit.overload_sweep.Sweep.figures`), each with
    ``fields`` (its setting, its server)."""
    rows = []
    for p in figures["points"]:
        rows.append({
            "kind": "overload", "config": figures["model"], "size": "500x375", "protocol": "grpc", **fields,
            "images_per_request": figures["images_per_request"], "concurrency": p["concurrency"],
            "factor": p["factor"], "saturating_concurrency": figures["saturating_concurrency"],
            "images_per_s": p["images_per_s"], "x_peak": p["x_peak"], "ok": p["ok"], "refused": p["refused"],
            "other": sum(p["other"].values()), "other_by_category": p["other"], "other_samples": p["samples"],
            "p50_ms": float("nan") if p["p50_ms"] is None else p["p50_ms"],
            "p99_ms": float("nan") if p["p99_ms"] is None else p["p99_ms"], "p99_x": p["p99_x"],
            "log_errors": p["log_errors"], "log_warnings": p["log_warnings"], "log_samples": p["log_samples"],
            "rss_peak_mb": p["rss_peak_mb"],
        })  # fmt: skip
    return rows


def sweep_key(setting_label: str, images_per_request: int) -> str:
    """The key of a sweep in ``summary["overload"]``: ``default, 8``."""
    return f"{setting_label}, {images_per_request}"


def gpu_counts(args: argparse.Namespace, visible: int) -> list[int]:
    """The GPU counts to sweep: ``--gpu-counts`` where given (and GPUs are visible), else one."""
    text = getattr(args, "gpu_counts", "") or ""
    return parse_counts(text, visible) if visible and text.strip() else [1]


def served(run: Run, args: argparse.Namespace, setting: Setting) -> None:
    """One server (the shipped repository) per GPU count, a sweep per request size on each."""
    from tritonprep.launcher.install import gpu_count

    visible = gpu_count()
    for count in gpu_counts(args, visible):
        label = setting.label if count == 1 else f"{setting.label}, {count} GPUs"
        tag = "overload" if count == 1 else f"overload-{count}gpus"
        # the shipped repository with the launcher's own options (its pool and queue timeout): what a deployment runs
        options = {"gpus": tuple(range(count))} if visible else {}
        with run.serve(tag, shipped_copy(run.work / f"repo-{tag}"), setting, options=options) as srv:
            for n in SIZES:
                found = overload_sweep.sweep(srv.server.options.grpc_url, "classify", run.sets["500x375"], n, PLAN,
                                             log_path=srv.log_path, rss=lambda: memory(srv.server))  # fmt: skip
                figures = found.figures()
                run.summary.setdefault("overload", {})[sweep_key(label, n)] = {k: figures[k] for k in SWEEP_KEYS}
                fields = {**setting.row_fields(), "setting": label, "server": srv.tag, "gpus": count,
                          "backoff_ms": PLAN.backoff_s * 1000}  # fmt: skip
                run.add_rows(rows_of(figures, fields))
