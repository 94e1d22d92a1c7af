"""The report's "GPU count" section: the ``gpus`` phase's counts side by side, and issue 35's goals.

Per model and point (8 images/request at 64 x N, 32 at 16 x N, c=1) the images/s of each GPU count and its ratio
to one GPU's, the p50 at c=1, the load generator's CPU and the GPUs' utilization; then the servers' launch to
ready and stop per count. Goals (same host, same run): ``classify`` at 8 and 32 images/request on 2 GPUs >= 1.9x
one GPU's and on 4 >= 3.8x; ``classify_fused`` and ``embed`` on 2 >= 1.85x; the c=1 p50 on N GPUs <= 1.05x one
GPU's; ready and stop on the most GPUs <= 1.2x one GPU's.
"""

from __future__ import annotations

from typing import Any

from .goals import Goal

#: (model, images per request, GPU count) -> the least ratio to one GPU
SCALING_GOALS = {("classify", b, n): 0.95 * n for b in (8, 32) for n in (2, 4)} | {
    (m, b, 2): 1.85 for m in ("classify_fused", "embed") for b in (8, 32)
}


def _rows(rows: list[dict]) -> dict[tuple[str, int, int], dict]:
    """The last ``gpus`` row of each (model, images per request, GPU count)."""
    found = {}
    for r in rows:
        if r.get("kind") == "gpus":
            found[(r["config"], int(r["images_per_request"]), int(r["gpus"]))] = r
    return found


def _servers(servers: list[dict]) -> dict[int, dict]:
    return {int(s["tag"].split("-")[1]): s for s in servers if str(s.get("tag", "")).startswith("gpus-")}


def gpu_goals(rows: list[dict], servers: list[dict]) -> list[Goal]:
    """Issue 35's goals from the ``gpus`` phase (none without it)."""
    found, by_count = _rows(rows), _servers(servers)
    goals = []
    for (model, batch, n), target in SCALING_GOALS.items():
        one, many = found.get((model, batch, 1)), found.get((model, batch, n))
        if one and many and one["images_per_s"]:
            value = many["images_per_s"] / one["images_per_s"]
            detail = f"{many['images_per_s']:,.0f} against {one['images_per_s']:,.0f} img/s"
            goals.append(Goal(f"`{model}` {batch} img/request, {n} GPUs / 1 GPU", value, target, detail=detail))
    counts = sorted({n for _, _, n in found})
    for n in counts[1:]:
        one, many = found.get(("classify", 1, 1)), found.get(("classify", 1, n))
        if one and many and one["p50_ms"]:
            detail = f"{many['p50_ms']:.2f} against {one['p50_ms']:.2f} ms"
            goals.append(Goal(f"`classify` c=1 p50, {n} GPUs / 1 GPU", many["p50_ms"] / one["p50_ms"], 1.05, True,
                              detail=detail))  # fmt: skip
    if len(by_count) > 1 and 1 in by_count:
        top = by_count[max(by_count)]
        for key, name in (("ready_s", "launch to ready"), ("stop_s", "stop")):
            if top.get(key) and by_count[1].get(key):
                detail = f"{top[key]:.1f} s on {max(by_count)} GPUs against {by_count[1][key]:.1f} s"
                goals.append(Goal(f"{name}, {max(by_count)} GPUs / 1 GPU", top[key] / by_count[1][key], 1.2, True,
                                  detail=detail))  # fmt: skip
        codes = {n: s.get("exit_code") for n, s in by_count.items()}
        goals.append(Goal("stops with exit code 0 (every count)", sum(c == 0 for c in codes.values()),
                          len(codes), unit="", detail=f"exit codes {codes}"))  # fmt: skip
    return goals


def gpus_section(rows: list[dict], summary: dict[str, Any]) -> list[str]:
    """The counts side by side, the servers per count, and the goals (none without the ``gpus`` phase)."""
    found = _rows(rows)
    if not found:
        return []
    counts = sorted({n for _, _, n in found})
    head = " | ".join(f"{n} GPU{'s' if n > 1 else ''}" for n in counts)
    lines = ["", "## GPU count (a tritonserver per GPU, shared ports, 500x375, gRPC)", "",
             f"| model | img/req | {head} | client / host CPU cores | GPU utilization % |",
             f"|---|---|{'---|' * len(counts)}---|---|"]  # fmt: skip
    for model in ("classify", "classify_fused", "embed"):
        for batch in (8, 32, 1):
            one = found.get((model, batch, 1))
            cells, cpu, util = [], [], []
            for n in counts:
                r = found.get((model, batch, n))
                if r is None:
                    cells.append("-")
                    continue
                if batch == 1:
                    cells.append(f"{r['p50_ms']:.2f} ms p50")
                else:
                    x = f" ({r['images_per_s'] / one['images_per_s']:.2f}x)" if one and one["images_per_s"] else ""
                    cells.append(f"{r['images_per_s']:,.0f}{x}")
                cpu.append(f"{r.get('client_cpu_cores', 0):.1f}/{r.get('host_cpu_cores', 0):.1f}")
                util.append(r.get("gpu_util") or "-")
            if any(c != "-" for c in cells):
                conc = "c=1" if batch == 1 else f"c={64 if batch == 8 else 16} x N"
                lines.append(f"| {model} | {batch} ({conc}) | {' | '.join(cells)} | {', '.join(cpu)} "
                             f"| {' ; '.join(util)} |")  # fmt: skip
    lines += ["", "Client / host CPU cores: perf_analyzer's CPU time over the measurement's wall time / the host's "
              "busy CPUs meanwhile (/proc/stat: every process, servers included). GPU utilization: nvidia-smi's mean "
              "per GPU index during the measurement."]  # fmt: skip
    by_count = _servers(summary.get("servers", []))
    if by_count:
        lines += ["", "| GPUs | tritonservers | launch to ready | stop | exit code | cross-device copies logged |",
                  "|---|---|---|---|---|---|"]  # fmt: skip
        for n, s in sorted(by_count.items()):
            servers_n, ready, stop = s.get("tritonservers", "-"), s.get("ready_s", "-"), s.get("stop_s", "-")
            copies = len(s.get("cross_device_copies", []))
            lines.append(f"| {n} | {servers_n} | {ready} s | {stop} s | {s.get('exit_code')} | {copies} |")
    goals = gpu_goals(rows, summary.get("servers", []))
    if goals:
        lines += ["", "Goals (issue 35):", "", *(g.line() for g in goals)]
    return lines
