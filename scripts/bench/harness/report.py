"""The run's report: results.csv (every row), results.md (the environment, every row, the summary, the server
settings side by side, the goals, the servers) and, on stdout, the same markdown."""

from __future__ import annotations

import csv
import datetime
import os
import platform
import sys
from pathlib import Path

from . import breakdown, engines, scaling, sections
from .figures import SERVED_KINDS, setting_of
from .gpu import smi_text
from .overload_report import overload_section
from .summary import summary_lines

#: results.csv's columns, in order
CSV_KEYS = ["kind", "config", "setting", "mps", "budget", "size", "protocol", "images_per_request", "concurrency",
            "batch", "images_per_s", "latency_ms", "p50_ms", "p90_ms", "p99_ms", "server_queue_ms",
            "server_compute_ms", "composing", "server", "gpus", "gpu_util", "processes",
            "client_cpu_cores", "host_cpu_cores"]  # fmt: skip


def environment() -> list[str]:
    """Date, commit, GPU, host and library versions."""
    smi = smi_text("--query-gpu=name,driver_version,memory.total", "--format=csv,noheader").strip() or "none seen"
    import numpy

    try:
        import cupy

        cupy_v = cupy.__version__
    except ImportError:
        cupy_v = "-"
    try:
        import onnxruntime

        ort_v = f"onnxruntime {onnxruntime.__version__} ({', '.join(onnxruntime.get_available_providers()[:2])})"
    except ImportError:
        ort_v = "no onnxruntime"
    return [
        f"- date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}",
        f"- commit: {os.environ.get('GIT_COMMIT', 'unknown')}",
        f"- GPU: {smi}",
        f"- host: {os.cpu_count()} CPUs, Python {platform.python_version()}, numpy {numpy.__version__}, "
        f"CuPy {cupy_v}, {ort_v}",
        "- Triton 2.51 (nvidia-pytriton 0.7.0 wheel), perf_analyzer from the perf-analyzer wheel",
    ]


def rows_table(rows: list[dict]) -> list[str]:
    """Every row, one line each (none without rows)."""
    if not rows:
        return []
    lines = [
        "| kind | config | setting | size | img/req or batch | conc | img/s | p50 ms | p99 ms | queue ms | compute ms "
        "| per model |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        setting = setting_of(r) if r.get("kind") in SERVED_KINDS else "-"
        lines.append(
            f"| {r['kind']} | {r.get('config', '')} | {setting} | {r.get('size', '')} "
            f"| {r.get('images_per_request', r.get('batch', ''))} "
            f"| {r.get('concurrency', '')} | {r['images_per_s']:,.0f} | {r.get('p50_ms', r.get('latency_ms', 0)):.2f} "
            f"| {r.get('p99_ms', 0):.2f} | {r.get('server_queue_ms', 0):.2f} | {r.get('server_compute_ms', 0):.2f} "
            f"| {'; '.join(x for x in (r.get('composing', ''), r.get('executes', ''), _busy(r)) if x)} |"
        )
    return lines


def _busy(row: dict) -> str:
    """``host 12.3 of 16 CPUs busy, sm 88 %, smutil 67 %``: what the measurement kept busy, "" where not recorded."""
    cpus = row.get("host_cpus")
    host = f"host {row['host_cpu_cores']:.1f} of {cpus} CPUs busy" if cpus and row.get("host_cpu_cores") else ""
    return ", ".join(x for x in (host, row.get("gpu_busy", "")) if x)


def _decode_once(summary: dict) -> list[str]:
    found = summary.get("decode_once")
    if not found:
        return []
    by_setting = found if isinstance(found, dict) else {"default": found}  # a list: a run before settings
    lines = []
    for label, body in by_setting.items():
        where = "" if label == "default" else f", {label}"
        lines += ["", f"## Decode once, serve two models (500x375, gRPC{where})", "", *body]
    return lines


def _profile(summary: dict) -> list[str]:
    main = [r for r in summary.get("servers", []) if r.get("tag") == "main" and r.get("profile")]
    if not main:
        return []
    return ["", f"Per-execute profile of the model instances (last lines of the main run, {setting_of(main[-1])}):",
            "", "```", *main[-1]["profile"], "```"]  # fmt: skip


def report_lines(rows: list[dict], summary: dict) -> list[str]:
    """results.md's lines."""
    servers = summary.get("servers", [])
    lines = ["# tritonprep benchmark", "", *environment(), "", *rows_table(rows)]
    lines += summary_lines(rows, summary)
    lines += sections.side_by_side(rows, summary)
    lines += sections.goal_lines(rows, summary)
    lines += sections.instances_ranking(rows, servers)
    lines += sections.startstop_section(servers)
    lines += scaling.gpus_section(rows, summary)
    lines += overload_section(rows, summary)
    lines += breakdown.breakdown_section(summary)
    lines += engines.engines_section(rows)
    lines += engines.kernels_section(summary)
    lines += sections.servers_table(servers)
    if summary.get("errors"):
        lines += ["", "## Errors", "", *(f"- {e}" for e in summary["errors"])]
    lines += _decode_once(summary)
    lines += _profile(summary)
    return lines


def write_report(rows: list[dict], summary: dict, out: Path) -> None:
    """results.md and results.csv from everything measured so far; the markdown also goes to stdout."""
    with open(out / "results.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_KEYS, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    lines = report_lines(rows, summary)
    (out / "results.md").write_text("\n".join(lines) + "\n")
    sys.stdout.write("\n".join(lines) + "\n")  # the report is this script's output
