"""The goals of issues 37 (one GPU at the network's pace), 24 (MPS) and 25 (memory, start and stop), each computed
from a run's rows and server records as a ratio or a figure against its target, met or not.

* The network's pace (issue 37): ``classify`` at 8 images/request c=64 >= 0.85x the classifier alone at batch 64
  and at 32 >= 0.9x, its c=1 p50 <= 2.5 ms and ``classify_fused``'s <= 2.0 ms (every setting with MPS on, else
  every setting); ``prep_sink`` at 32 >= 1.3x DALI's best and >= 0.8x the decode ceiling (every setting).
* MPS: where MPS on and off were both measured (same budget): ``classify`` at 8, c=64 >= 1.6x its MPS-off
  figure, and its c=1 p50 with MPS no worse than without.
* Memory, start and stop (the ``startstop`` phase's starts of the default repository, per setting): GPU
  memory at ready <= 12 GiB, under load <= 14 GiB (over the GPUs' use before the launch), launch to
  ready <= 15 s, stop <= 5 s, exit code 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .figures import (
    best,
    ceiling_rate,
    classifier_alone,
    dali_rate,
    last,
    rate,
    ratio,
    setting_of,
    settings_measured,
    triton,
)
from .serving import server_mib

GIB = 1024  # MiB


@dataclass(frozen=True)
class Goal:
    """A figure against its target: met when ``value >= target`` (``at_most``: ``value <= target``)."""

    name: str
    value: float | None
    target: float
    at_most: bool = False
    unit: str = "x"
    detail: str = ""

    @property
    def met(self) -> bool | None:
        """True/False, None when not measured."""
        if self.value is None:
            return None
        return self.value <= self.target if self.at_most else self.value >= self.target

    def _fmt(self, v: float) -> str:
        if self.unit == "x":
            return f"{v:.2f}x"
        if self.unit == "MiB":
            return f"{v:,.0f} MiB"
        if not self.unit:
            return f"{v:g}"
        return f"{v:.2f} {self.unit}".rstrip()

    def line(self) -> str:
        """``- **met**: NAME: VALUE (goal >= TARGET; DETAIL)``."""
        sign = "<=" if self.at_most else ">="
        goal = f"goal {sign} {self._fmt(self.target)}"
        if self.met is None:
            return f"- not measured: {self.name} ({goal}{'; ' + self.detail if self.detail else ''})"
        verdict = "**met**" if self.met else "**NOT met**"
        return f"- {verdict}: {self.name}: {self._fmt(self.value)} ({goal}{'; ' + self.detail if self.detail else ''})"


def mps_pairs(rows: list[dict]) -> list[tuple[str, str]]:
    """(MPS on label, MPS off label) for each budget measured with both."""
    settings = settings_measured(rows)
    pairs = []
    for on in (s for s in settings if s["mps"] == "on"):
        off = next((s for s in settings if s["mps"] == "off" and s["budget"] == on["budget"]), None)
        if off is not None:
            pairs.append((on["label"], off["label"]))
    return pairs


#: issue 37's goal for ``classify`` at 8 images/request against the classifier alone at batch 64 (32: 0.9x)
PACE_GOAL = 0.85
#: issue 37's c=1 p50 goals, ms
C1_GOALS_MS = {"classify": 2.5, "classify_fused": 2.0}


def _p50(rows: list[dict], setting: str, model: str = "classify") -> dict | None:
    return last(rows, **triton(setting, model, 1, concurrency=1))


def pace_goals(rows: list[dict], summary: dict[str, Any]) -> list[Goal]:
    """Issue 37's goals, as measured in this run (see the module's description)."""
    if not any(r.get("kind") == "triton" for r in rows):
        return []
    settings = settings_measured(rows)
    subjects = [s["label"] for s in settings if s["mps"] == "on"] or [s["label"] for s in settings]
    alone = classifier_alone(rows)
    alone_rate = rate(alone)
    dali, ceil = dali_rate(rows, summary) or None, ceiling_rate(rows, summary) or None
    goals: list[Goal] = []
    for s in subjects:
        c8 = last(rows, **triton(s, "classify", 8, concurrency=64))
        c32 = best(rows, **triton(s, "classify", 32))
        alone_note = f"classifier alone b64 {alone_rate:,.0f} img/s" if alone_rate else "classifier alone not measured"
        goals += [
            Goal(f"classify 8 img/request c=64 ({s}) / the classifier alone at batch 64", ratio(rate(c8), alone_rate),
                 PACE_GOAL, detail=f"{rate(c8) or 0:,.0f} img/s; {alone_note}"),
            Goal(f"classify 32 img/request ({s}, best c) / the classifier alone at batch 64",
                 ratio(rate(c32), alone_rate), 0.9, detail=f"{rate(c32) or 0:,.0f} img/s; {alone_note}"),
        ]  # fmt: skip
        for model, target in C1_GOALS_MS.items():
            p50 = _p50(rows, s, model)
            goals.append(Goal(f"{model} c=1 p50 ({s})", p50["p50_ms"] if p50 else None, target, at_most=True,
                              unit="ms"))  # fmt: skip
    for s in (s["label"] for s in settings):  # the preprocessing against its one-process references, every setting
        p32 = best(rows, **triton(s, "prep_sink", 32))
        goals += [
            Goal(f"prep_sink 32 img/request ({s}, best c) / DALI best", ratio(rate(p32), dali), 1.3,
                 detail=f"{rate(p32) or 0:,.0f} vs {dali or 0:,.0f} img/s"),
            Goal(f"prep_sink 32 img/request ({s}, best c) / the decode ceiling", ratio(rate(p32), ceil), 0.8,
                 detail=f"{rate(p32) or 0:,.0f} vs {ceil or 0:,.0f} img/s"),
        ]  # fmt: skip
    return goals


def mps_goals(rows: list[dict], summary: dict[str, Any]) -> list[Goal]:
    """The MPS issue's goals where MPS on and off were both measured (see the module's description)."""
    goals: list[Goal] = []
    for on, off in mps_pairs(rows):
        c_on = last(rows, **triton(on, "classify", 8, concurrency=64))
        c_off = last(rows, **triton(off, "classify", 8, concurrency=64))
        goals.append(Goal(f"classify 8 img/request c=64, {on} / {off}", ratio(rate(c_on), rate(c_off)), 1.6,
                          detail=f"{rate(c_on) or 0:,.0f} vs {rate(c_off) or 0:,.0f} img/s"))  # fmt: skip
        p_on, p_off = _p50(rows, on), _p50(rows, off)
        goals.append(
            Goal(f"classify c=1 p50, {on} - {off}", None if not (p_on and p_off) else p_on["p50_ms"] - p_off["p50_ms"],
                 0.0, at_most=True, unit="ms",
                 detail="" if not (p_on and p_off) else f"{p_on['p50_ms']:.2f} vs {p_off['p50_ms']:.2f} ms")
        )  # fmt: skip
    return goals


def startstop_records(servers: list[dict]) -> dict[str, list[dict]]:
    """The ``startstop`` phase's server records by setting label, in start order."""
    found: dict[str, list[dict]] = {}
    for r in servers:
        if str(r.get("tag", "")).startswith("startstop-"):
            found.setdefault(setting_of(r), []).append(r)
    return found


def memory_goals(servers: list[dict]) -> list[Goal]:
    """The memory, start and stop goals of the default repository, per setting measured."""
    goals: list[Goal] = []
    for label, starts in startstop_records(servers).items():
        ready = [r for r in starts if r.get("ready_s") is not None]
        at_ready = [m for m in (server_mib(r, "ready_mib") for r in ready) if m is not None]
        loaded = [m for m in (server_mib(r, "peak_mib") for r in ready if r.get("loaded")) if m is not None]
        stops = [r for r in ready if r.get("stop_s") is not None]
        codes = [r.get("exit_code") for r in stops]
        failed = len(starts) - len(ready)
        goals += [
            Goal(f"default repository at ready ({label}, the most of {len(at_ready)} start(s))",
                 max(at_ready) if at_ready else None, 12 * GIB, at_most=True, unit="MiB"),
            Goal(f"default repository under load ({label}, peak)", max(loaded) if loaded else None, 14 * GIB,
                 at_most=True, unit="MiB"),
            Goal(f"launch to ready ({label}, the slowest of {len(ready)} start(s))",
                 max(r["ready_s"] for r in ready) if ready else None, 15.0, at_most=True, unit="s",
                 detail=f"{failed} start(s) never ready" if failed else ""),
            Goal(f"stop ({label}, the slowest of {len(stops)})", max(r["stop_s"] for r in stops) if stops else None,
                 5.0, at_most=True, unit="s"),
            Goal(f"stops whose exit code is not 0 ({label})", sum(1 for c in codes if c != 0) if stops else None, 0,
                 at_most=True, unit="", detail=f"exit codes {codes}"),
        ]  # fmt: skip
    return goals
