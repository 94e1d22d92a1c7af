"""The report's "Overload" section: the ``overload`` phase's sweeps, a table per server setting and request size, and
issue 38's goals.

Per point (k times the saturating concurrency): the concurrency, images/s answered right and against the 1x point
("x peak"), requests answered right, refused for overload and failed otherwise, p50/p99 of the answered ones and
the p99 against the 1x point's, and the E/W lines of the server's log. Goals, per setting and request size: at 2x,
4x and 8x >= 0.95x the 1x point's images/s and a p99 <= 2x its p99; no other error and no E or W log line in the
whole sweep (its search included).
"""

from __future__ import annotations

import math
from typing import Any

from .figures import setting_of
from .goals import Goal

#: the least images/s at k > 1, against the 1x point's
HOLD = 0.95
#: the most p99 at k > 1, against the 1x point's
P99_X = 2.0


def sweeps(rows: list[dict]) -> dict[tuple[str, int], dict[float, dict]]:
    """The last ``overload`` row of each (setting, images per request, factor), by (setting, images per request)."""
    found: dict[tuple[str, int], dict[float, dict]] = {}
    for r in rows:
        if r.get("kind") == "overload":
            found.setdefault((setting_of(r), int(r["images_per_request"])), {})[float(r["factor"])] = r
    return {key: dict(sorted(points.items())) for key, points in found.items()}


def _ms(value: float | None) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.1f}"


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _other(r: dict) -> str:
    if not r.get("other"):
        return "0"
    kinds = ", ".join(f"{k} {n}" for k, n in r.get("other_by_category", {}).items())
    return f"**{r['other']}** ({kinds})"


def _info(summary: dict[str, Any], setting: str, n: int) -> dict[str, Any]:
    return summary.get("overload", {}).get(f"{setting}, {n}", {})


def overload_goals(rows: list[dict], summary: dict[str, Any]) -> list[Goal]:
    """Issue 38's goals from the ``overload`` phase (none without it)."""
    goals = []
    for (setting, n), points in sweeps(rows).items():
        one = points.get(1.0)
        name = f"`classify` {n} img/request ({setting})"
        for k, r in points.items():
            if k == 1.0:
                continue
            detail = (
                f"c={r['concurrency']}: {r['images_per_s']:,.0f} against {one['images_per_s']:,.0f} img/s"
                if one
                else ""
            )
            goals.append(Goal(f"{name} at {k:g}x the saturating concurrency: img/s / 1x", r.get("x_peak"), HOLD,
                              detail=detail))  # fmt: skip
        info = _info(summary, setting, n)
        other = sum(r.get("other", 0) for r in points.values()) + info.get("search_other", 0)
        samples = {c: s for r in points.values() for c, s in (r.get("other_samples") or {}).items()}
        goals.append(Goal(f"{name}: requests neither answered right nor refused for overload (every k, the search)",
                          other, 0, at_most=True, unit="", detail=f"e.g. {samples}" if samples else ""))  # fmt: skip
        lines = sum(r.get("log_errors", 0) + r.get("log_warnings", 0) for r in points.values())
        lines += info.get("search_log_lines", 0)
        first = next((s for r in points.values() for s in r.get("log_samples", [])), "")
        goals.append(Goal(f"{name}: E and W lines in the server's log during the sweep", lines, 0, at_most=True,
                          unit="", detail=f"first: {first}" if first else ""))  # fmt: skip
        for k, r in points.items():
            if k == 1.0:
                continue
            p99 = r.get("p99_ms")
            detail = f"{_ms(p99)} against {_ms(one['p99_ms'])} ms" if one else ""
            goals.append(Goal(f"{name} at {k:g}x: p99 / p99 at saturation", r.get("p99_x"), P99_X, at_most=True,
                              detail=detail))  # fmt: skip
    return goals


def overload_section(rows: list[dict], summary: dict[str, Any]) -> list[str]:
    """A table per setting and request size, then the goals (none without the ``overload`` phase)."""
    found = sweeps(rows)
    if not found:
        return []
    backoff = next(iter(next(iter(found.values())).values())).get("backoff_ms", 3.0)
    lines = ["", "## Overload (classify, closed loop at k x the saturating concurrency, 500x375, gRPC)", "",
             f"Each point: the clients send back to back, a refused one waits {backoff:g} ms; counts are of every "
             "request sent, img/s and latencies of those answered right after a warm-up. Refused: \"Exceeds maximum "
             "queue size\" or \"Request timeout expired\"; other errors: anything else, a wrong answer included.",
             ]  # fmt: skip
    for (setting, n), points in found.items():
        info = _info(summary, setting, n)
        sat = next(iter(points.values()))["saturating_concurrency"]
        search = ", ".join(f"c={c} {rate:,.0f}" for c, rate in info.get("search", {}).items())
        lines += ["", f"### {n} img/request ({setting}): saturating concurrency {sat}", ""]
        if search:
            lines += [f"Search (img/s): {search}.", ""]
        lines += ["| k | concurrency | img/s | x peak | ok | refused | other errors | p50 ms | p99 ms "
                  "| p99 x saturation | E/W log lines |", "|---" * 11 + "|"]  # fmt: skip
        for k, r in points.items():
            lines.append(
                f"| {k:g} | {r['concurrency']} | {r['images_per_s']:,.0f} | {_x(r.get('x_peak'))} | {r['ok']:,} "
                f"| {r['refused']:,} | {_other(r)} | {_ms(r.get('p50_ms'))} | {_ms(r.get('p99_ms'))} "
                f"| {_x(r.get('p99_x'))} | {r.get('log_errors', 0)} E, {r.get('log_warnings', 0)} W |"
            )
        if info.get("problems"):
            lines += ["", *(f"- {p}" for p in info["problems"])]
        elif info:
            lines += [
                "",
                f"After the sweep: ready {info.get('ready_after')}, a request got {info.get('answered_after')}.",
            ]
    goals = overload_goals(rows, summary)
    if goals:
        lines += ["", "Goals (issue 38):", "", *(g.line() for g in goals)]
    return lines
