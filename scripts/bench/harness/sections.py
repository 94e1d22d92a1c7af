"""Sections of the report for the server settings and the servers: the settings side by side (MPS on and off,
GPU memory budgets) with ratios, every server's start, stop and GPU memory, the start-up breakdown of the
default repository, and the instance counts ranked. Each returns markdown lines (none when nothing of it was
measured)."""

from __future__ import annotations

from typing import Any

from .figures import (
    best,
    ceiling_rate,
    classifier_alone,
    dali_rate,
    fmt_rate,
    fmt_x,
    last,
    rate,
    ratio,
    setting_of,
    settings_measured,
    triton,
)
from .goals import memory_goals, mps_goals, mps_pairs, pace_goals, startstop_records
from .serving import instances_summary, server_mib, startup_breakdown


def _mib(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} ms"


def _num(value: dict | float | None) -> float | None:
    return rate(value) if isinstance(value, dict) else value


def side_by_side(rows: list[dict], summary: dict[str, Any]) -> list[str]:
    """The settings side by side, a column each, and MPS on / off where both were measured."""
    servers = summary.get("servers", [])
    settings = [s["label"] for s in settings_measured(rows)]
    if len(settings) < 2 and not any(s != "default" for s in settings):
        return []
    pairs = mps_pairs(rows)
    alone = rate(classifier_alone(rows))
    dali, ceil = dali_rate(rows, summary) or None, ceiling_rate(rows, summary) or None

    def cells(fn: Any, fmt: Any) -> list[str]:
        """``fmt(fn(setting))`` per setting, then ``fn(on) / fn(off)`` per MPS pair (rows compared by images/s)."""
        return [fmt(fn(s)) for s in settings] + [fmt_x(ratio(_num(fn(on)), _num(fn(off)))) for on, off in pairs]

    def c8(s: str, model: str = "classify") -> dict | None:
        return last(rows, **triton(s, model, 8, concurrency=64))

    def p50(s: str, model: str = "classify") -> float | None:
        r = last(rows, **triton(s, model, 1, concurrency=1))
        return r["p50_ms"] if r else None

    lines_ = [
        ("classify, 8 img/request, c=64 (img/s)", cells(c8, fmt_rate)),
        ("classify_fused, 8 img/request, c=64", cells(lambda s: c8(s, "classify_fused"), fmt_rate)),
        ("classify 8/c=64 / classifier alone b64", cells(lambda s: ratio(rate(c8(s)), alone), fmt_x)),
        ("classify, 32 img/request (best c)", cells(lambda s: best(rows, **triton(s, "classify", 32)), fmt_rate)),
        ("classify 32 / classifier alone b64",
         cells(lambda s: ratio(rate(best(rows, **triton(s, "classify", 32))), alone), fmt_x)),
        ("classify_fused, 32 img/request (best c)",
         cells(lambda s: best(rows, **triton(s, "classify_fused", 32)), fmt_rate)),
        ("null_classify (no preprocessing work) 8/c=64 / classifier alone b64",
         cells(lambda s: ratio(rate(c8(s, "null_classify")), alone), fmt_x)),
        ("classify 8/c=64 / null_classify 8/c=64", cells(lambda s: ratio(rate(c8(s)), rate(c8(s, "null_classify"))),
                                                         fmt_x)),
        ("null_classify 32 (best c) / classifier alone b64",
         cells(lambda s: ratio(rate(best(rows, **triton(s, "null_classify", 32))), alone), fmt_x)),
        ("classify 32 / null_classify 32 (best c each)",
         cells(lambda s: ratio(rate(best(rows, **triton(s, "classify", 32))),
                               rate(best(rows, **triton(s, "null_classify", 32)))), fmt_x)),
        ("prep_sink, 32 img/request (best c)", cells(lambda s: best(rows, **triton(s, "prep_sink", 32)), fmt_rate)),
        ("prep_sink 32 / DALI best", cells(lambda s: ratio(rate(best(rows, **triton(s, "prep_sink", 32))), dali),
                                           fmt_x)),
        ("prep_sink 32 / decode ceiling",
         cells(lambda s: ratio(rate(best(rows, **triton(s, "prep_sink", 32))), ceil), fmt_x)),
        ("classify c=1 p50", cells(p50, _ms)),
        ("classify_fused c=1 p50", cells(lambda s: p50(s, "classify_fused"), _ms)),
    ]  # fmt: skip
    for tag in dict.fromkeys(r["tag"] for r in servers if "ready_s" in r):
        if not str(tag).startswith(("startstop-", "inst-", "tune-")):
            peak = {setting_of(r): server_mib(r, "peak_mib") for r in servers if r.get("tag") == tag}
            lines_.append((f"{tag} server: peak GPU MiB over the baseline", cells(peak.get, _mib)))
    head = ["figure", *settings, *(f"{on} / {off}" for on, off in pairs)]
    out = ["", "## Server settings side by side (500x375, gRPC)", "",
           f"References (one process, measured once): classifier alone b64 {alone or 0:,.0f} img/s, DALI best "
           f"{dali or 0:,.0f} img/s, decode ceiling {ceil or 0:,.0f} img/s.", "",
           "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]  # fmt: skip
    out += [f"| {name} | " + " | ".join(vals) + " |" for name, vals in lines_]
    out.append("")
    for s in settings:
        r = last(rows, **triton(s, "classify", 1, concurrency=1))
        if r and r.get("composing"):
            out.append(f"- classify c=1 per step ({s}): {r['composing']}")
    return out


def goal_lines(rows: list[dict], summary: dict[str, Any]) -> list[str]:
    """Every goal of the pace, MPS and memory issues that this run can judge (``met`` / ``NOT met`` / not
    measured)."""
    goals = [*pace_goals(rows, summary), *mps_goals(rows, summary), *memory_goals(summary.get("servers", []))]
    if not goals:
        return []
    return ["", "## Goals", "", *(g.line() for g in goals)]


def servers_table(servers: list[dict]) -> list[str]:
    """Every server started: launch to ready, stop, exit code, the watchdog's kills, GPU memory."""
    if not servers:
        return []
    out = ["", "## Servers (launch to ready, stop, GPU memory over the baseline before each launch)", "",
           "| server | setting | MPS | ready s | stop s | exit | watchdog killed | MiB at ready | peak MiB "
           "| largest process at peak | instances (reported) |", "|---" * 11 + "|"]  # fmt: skip
    for r in servers:
        top = max((r.get("by_process_peak") or {}).items(), key=lambda kv: kv[1], default=None)
        ready = r.get("ready_s")
        killed = f"{r.get('killed_leftovers', 0)}{' (SIGKILL)' if r.get('forced_kill') else ''}"
        out.append(
            f"| {r.get('tag')} | {setting_of(r)} | {r.get('mps') or '-'} | {'-' if ready is None else ready} "
            f"| {r.get('stop_s', '-')} "
            f"| {r.get('exit_code', '-')} | {killed} | {_mib(server_mib(r, 'ready_mib'))} "
            f"| {_mib(server_mib(r, 'peak_mib'))} | {f'{top[0]} {top[1]:,}' if top else '-'} "
            f"| {instances_summary(r.get('instances') or []) or '-'} |"
        )
        if r.get("error"):
            out.append(f"|  | did not start: {r['error']} | | | | | | | | | |")
    return out


def startstop_section(servers: list[dict]) -> list[str]:
    """The default repository's starts: times, exit codes, and the slowest start's breakdown per model."""
    by_setting = startstop_records(servers)
    if not by_setting:
        return []
    out = ["", "## Start and stop of the default repository", ""]
    for label, starts in by_setting.items():
        ready = [r for r in starts if r.get("ready_s") is not None]
        forced = sum(1 for r in starts if r.get("forced_kill"))
        out.append(
            f"- {label}: launch to ready {[r.get('ready_s') for r in starts]} s, "
            f"stop {[r.get('stop_s') for r in starts]} s, exit codes {[r.get('exit_code') for r in starts]}, "
            f"watchdog killed {sum(r.get('killed_leftovers', 0) for r in starts)} leftover process(es)"
            + (f", tritonserver SIGKILLed {forced} time(s)" if forced else "")
        )
        if not ready:
            continue
        slowest = max([r for r in ready if r.get("instances")] or ready, key=lambda r: r["ready_s"])
        models = startup_breakdown(slowest.get("instances") or [])
        if not models:
            out.append("  - no instance reports (a launcher without TRITONPREP_REPORT_DIR)")
        for model, m in sorted(models.items()):
            phases = ", ".join(f"{k} {v:.2f}" for k, v in sorted(m["slowest_s"].items(), key=lambda kv: -kv[1]))
            out.append(f"  - {model} x{m['instances']} ({', '.join(m['kinds'])}, {m['gpu_mb']:,} MiB reported): "
                       f"slowest instance {phases or 'no timings'} s (start {slowest['tag']})")  # fmt: skip
        for r in starts:
            if r.get("faults"):
                out.append(f"  - {r['tag']}: instance faults {[f.get('reason') for f in r['faults']]}")
    return out


def instances_ranking(rows: list[dict], servers: list[dict], top: int = 5) -> list[str]:
    """The instance counts ranked per setting and model by images/s at 8 plus 32 images/request, each with its
    images/s at one image a request under load and its p50 at c=1 where measured, its server's peak GPU memory and
    launch to ready."""
    inst = [r for r in rows if r.get("kind") == "instances"]
    if not inst:
        return []
    records = {(r.get("tag"), setting_of(r)): r for r in servers}
    out = ["", "## Instance counts (by img/s at 8 img/request c=64 and 32 c=16, c=1 beside; one server each)", ""]
    groups: dict[tuple[str, str], dict[str, dict]] = {}
    for r in inst:
        key = (setting_of(r), r["model"])
        entry = groups.setdefault(key, {}).setdefault(r["config"], {"server": r.get("server")})
        entry[r["images_per_request"]] = r["images_per_s"]
        if r["images_per_request"] == 1 and r.get("concurrency") == 1:
            entry["p50_1"] = r.get("p50_ms")
        elif r["images_per_request"] == 1:  # one image a request under load: the network's mid-sized batches
            entry["one"] = (r.get("concurrency"), r["images_per_s"])
    for (label, model), configs in groups.items():
        ranked = sorted(configs.items(), key=lambda kv: -(kv[1].get(8, 0) + kv[1].get(32, 0)))
        out.append(f"- {model} ({label}), best first:")
        for config, v in ranked[:top]:
            record = records.get((v["server"], label), {})
            one = f", 1 img/request c={v['one'][0]} {v['one'][1]:,.0f} img/s" if "one" in v else ""
            c1 = f", c=1 p50 {_ms(v['p50_1'])}" if "p50_1" in v else ""
            ready = f", ready in {record['ready_s']:.1f} s" if record.get("ready_s") is not None else ""
            peak = server_mib(record, "peak_mib") if record else None
            out.append(f"  - {config}: {v.get(8, 0):,.0f} img/s at 8, {v.get(32, 0):,.0f} at 32{one}{c1}; "
                       f"peak {_mib(peak)} MiB{ready}")  # fmt: skip
    return out
