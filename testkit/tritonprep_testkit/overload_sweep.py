"""The closed-loop overload sweep (issue 38): does a served model hold its peak when offered more than it can take,
refusing the excess early and clearly, without failing inside?

Against a running server (gRPC), for one model at ``n`` images/request:

1. the **saturating concurrency**: closed loop (each client thread sends its next request as soon as the last one
   is answered) at concurrency 1, 2, 4, ... until the images/s stop growing by 5 %; the saturating one is the
   smallest within 5 % of the best (:func:`saturating_concurrency`); or given;
2. closed loop at ``k`` times it for each ``k`` of the plan's factors (default 1, 2, 4, 8), each for a bounded
   time; a client whose request was refused (or failed) waits a small fixed backoff (3 ms) before its next one, so
   refused clients do not spin.

Each point (:class:`Point`) counts every request sent: answered right, refused for overload (Triton's "Exceeds
maximum queue size" and "Request timeout expired", :data:`OVERLOAD`) and every other outcome by category with one
message each (a wrong answer is one: ``wrong-answer``); and, over its measurement window (after a warm-up), the
images/s answered right and the p50/p99 latency of the answered requests. Answers are checked against a
reference taken once per photo at c=1 (:func:`.closed_loop.reference`): each output's shape, and for a model
with ``CLASS_IDS`` and ``SCORES`` the top-1 class. Given Triton's log, each point counts the E (and F) and W
lines written meanwhile (:class:`LogWatch`); given a memory reader, the servers' peak resident memory.
:meth:`Sweep.figures` adds each point's ratios to the 1x point (images/s, p99).

Traffic goes to the URL given only; every loop is bounded in time. The clients are threads of this process, or of
``processes`` spawned ones (one Python process cannot offer a GPU server thousands of requests per second)
(:mod:`.closed_loop`).

    python -m scripts.overload sweep --model classify --images-per-request 8     # a server of its own
    python -m scripts.overload sweep --url 127.0.0.1:8001 --log /tmp/tritonserver.log --concurrency 16
"""

from __future__ import annotations

import argparse
import logging
import re
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from .closed_loop import Expected, Load, PeakMemory, after_check, batches_of, closed_loop, reference
from .loadgen import percentile

log = logging.getLogger("overload_sweep")

#: the categories (:func:`~.loadgen.categorize`) of a request refused for overload
OVERLOAD = frozenset({"queue-full", "queue-timeout"})
#: a glog line of Triton (or of a stub's logger): severity, then MMDD and the time
_GLOG = re.compile(r"^([IWEF])\d{4} \d\d:\d\d:\d\d")
MB = 1 << 20


# ---------------------------------------------------------------------- the plan and the pure parts
@dataclass(frozen=True)
class Plan:
    """How a sweep runs: factors of the saturating concurrency, durations (s), the client's backoff after a refused
    request (s) and deadline (s), how far the search may go, and the client processes (0: threads of this one)."""

    factors: tuple[float, ...] = (1, 2, 4, 8)
    seconds: float = 10.0
    warmup_s: float = 2.0
    search_seconds: float = 3.0
    search_warmup_s: float = 1.0
    growth: float = 0.05
    max_concurrency: int = 512
    backoff_s: float = 0.003
    timeout_s: float = 30.0
    processes: int = 0

    def __post_init__(self) -> None:
        if not self.factors or any(k <= 0 for k in self.factors):
            raise ValueError(f"factors must be positive, got {self.factors}")
        if min(self.seconds, self.search_seconds) <= 0 or min(self.warmup_s, self.search_warmup_s) < 0:
            raise ValueError("seconds must be positive and warm-ups not negative")
        if not 0 < self.growth < 1 or self.max_concurrency < 1 or self.backoff_s < 0 or self.processes < 0:
            raise ValueError(f"growth in (0, 1), max_concurrency >= 1, backoff and processes >= 0: {self}")


def saturating_concurrency(rates: dict[int, float], within: float = 0.05) -> int:
    """The smallest concurrency whose images/s are within ``within`` of the best of ``rates`` (concurrency ->
    images/s)."""
    if not rates:
        raise ValueError("no concurrency measured")
    best = max(rates.values())
    return min(c for c, r in rates.items() if r >= (1 - within) * best)


def still_growing(rates: dict[int, float], growth: float = 0.05) -> bool:
    """Whether the highest concurrency of ``rates`` gave at least ``growth`` more images/s than every lower one."""
    ordered = sorted(rates)
    if len(ordered) < 2:
        return True
    return rates[ordered[-1]] >= (1 + growth) * max(rates[c] for c in ordered[:-1])


@dataclass(frozen=True)
class LogCount:
    """E (and F) and W lines of Triton's log, and the first few of them."""

    errors: int = 0
    warnings: int = 0
    samples: tuple[str, ...] = ()


def count_log_lines(text: str, keep: int = 3) -> LogCount:
    """The E/F and W lines of a piece of Triton's log (glog lines: ``E1126 16:03:42.801993 3335 file.cc:170] ...``)."""
    errors = warnings = 0
    samples: list[str] = []
    for line in text.splitlines():
        found = _GLOG.match(line)
        if found is None or found.group(1) == "I":
            continue
        if found.group(1) == "W":
            warnings += 1
        else:
            errors += 1
        if len(samples) < keep:
            samples.append(line[:300])
    return LogCount(errors, warnings, tuple(samples))


class LogWatch:
    """The lines a log file gets from now on: each :meth:`take` counts those written since the last one (whole
    lines only); a watch without a path counts nothing."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.offset = path.stat().st_size if path is not None and path.is_file() else 0

    def take(self) -> LogCount:
        """The E/W lines written since the last take (or the watch's start)."""
        if self.path is None or not self.path.is_file():
            return LogCount()
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            data = f.read()
        whole = data[: data.rfind(b"\n") + 1]
        self.offset += len(whole)
        return count_log_lines(whole.decode(errors="replace"))


# ---------------------------------------------------------------------- points and the sweep
@dataclass(frozen=True)
class Point:
    """One closed-loop point: counts over every request sent, rates and latencies over the measurement window."""

    concurrency: int
    seconds: float
    images_per_s: float
    ok: int
    refused: int
    other: dict[str, int]
    samples: dict[str, str]
    p50_ms: float | None
    p99_ms: float | None
    log_errors: int = 0
    log_warnings: int = 0
    log_samples: tuple[str, ...] = ()
    rss_peak_mb: float | None = None
    rss_peak_by_process_mb: dict[str, float] | None = None


def _ms(latencies: list[float], q: float) -> float | None:
    return round(percentile(latencies, q) * 1000, 2) if latencies else None


def run_point(load: Load, photos: Sequence[bytes], expected: Expected, seconds: float, warmup_s: float,
              processes: int = 0, log_watch: LogWatch | None = None,
              rss: Callable[[], dict[str, int]] | None = None) -> Point:  # fmt: skip
    """``load`` for ``warmup_s`` + ``seconds``, its log lines and the servers' peak memory meanwhile."""
    watch = log_watch or LogWatch(None)
    with PeakMemory(rss) as peak:
        tally, window = closed_loop(load, photos, expected, seconds, warmup_s, processes)
    lines = watch.take()
    refused = sum(tally.counts[c] for c in OVERLOAD)
    other = {c: n for c, n in sorted(tally.counts.items()) if c != "ok" and c not in OVERLOAD}
    point = Point(load.concurrency, window, round(tally.images / window, 1), tally.counts["ok"], refused, other,
                  {c: tally.samples[c] for c in tally.samples if c != "ok"}, _ms(tally.latencies, 50),
                  _ms(tally.latencies, 99), lines.errors, lines.warnings, lines.samples,
                  round(peak.peak / MB, 1) if rss is not None else None,
                  {k: round(v / MB, 1) for k, v in peak.by_process.items()} if rss is not None else None)  # fmt: skip
    log.info("%s c=%d: %.1f img/s, %d ok, %d refused, other %s, p50 %s ms, p99 %s ms, log E %d W %d",
             load.model, load.concurrency, point.images_per_s, point.ok, refused, other or "none", point.p50_ms,
             point.p99_ms, lines.errors, lines.warnings)  # fmt: skip
    return point


@dataclass
class Sweep:
    """A sweep's result: the search's points (by concurrency; none when it was given), the saturating concurrency,
    a point per factor, and after them: whether the server was ready, what one request got, and the log lines."""

    model: str
    images_per_request: int
    saturating: int
    search: dict[int, Point]
    points: dict[float, Point]
    ready_after: bool | None = None
    answered_after: str = ""
    log_after: LogCount = LogCount()

    def labelled(self) -> list[tuple[str, Point]]:
        """Every point, the search's first, each with a label (``search c=4``, ``4x c=16``)."""
        return [*((f"search c={c}", p) for c, p in self.search.items()),
                *((f"{k:g}x c={p.concurrency}", p) for k, p in self.points.items())]  # fmt: skip

    def problems(self) -> list[str]:
        """What broke the rules of issue 38 (none: it held): any outcome but answered right or refused for
        overload, an E or W line in Triton's log, a point with nothing answered right, a server not ready or not
        answering right after the sweep."""
        found = []
        for label, p in self.labelled():
            if p.other:
                found.append(f"{label}: other outcomes {p.other}, e.g. {p.samples}")
            if p.log_errors or p.log_warnings:
                found.append(f"{label}: {p.log_errors} E and {p.log_warnings} W line(s) in Triton's log: "
                             f"{list(p.log_samples)}")  # fmt: skip
            if not p.ok:
                found.append(f"{label}: no request answered right")
        if self.log_after.errors or self.log_after.warnings:
            found.append(f"after the sweep: E/W lines in Triton's log: {list(self.log_after.samples)}")
        if self.ready_after is False:
            found.append("after the sweep: the server is not ready")
        if self.answered_after != "ok":
            found.append(f"after the sweep: a request got {self.answered_after or 'nothing'}")
        return found

    def figures(self) -> dict[str, Any]:
        """Everything as plain values, each point with its images/s and p99 against the first factor's point."""
        base = next(iter(self.points.values()), None)
        points = []
        for k, p in self.points.items():
            x = p.images_per_s / base.images_per_s if base and base.images_per_s else None
            p99_x = p.p99_ms / base.p99_ms if base and base.p99_ms and p.p99_ms is not None else None
            points.append({"factor": k, **asdict(p), "log_samples": list(p.log_samples),
                           "x_peak": None if x is None else round(x, 3),
                           "p99_x": None if p99_x is None else round(p99_x, 3)})  # fmt: skip
        return {"model": self.model, "images_per_request": self.images_per_request,
                "saturating_concurrency": self.saturating,
                "search": {str(c): p.images_per_s for c, p in self.search.items()},
                "search_log_lines": sum(p.log_errors + p.log_warnings for p in self.search.values()),
                "search_other": sum(sum(p.other.values()) for p in self.search.values()),
                "points": points, "ready_after": self.ready_after, "answered_after": self.answered_after,
                "log_after": asdict(self.log_after), "problems": self.problems()}  # fmt: skip


def find_saturation(load: Load, photos: Sequence[bytes], expected: Expected, plan: Plan,
                    log_watch: LogWatch | None = None) -> tuple[int, dict[int, Point]]:  # fmt: skip
    """Concurrency 1, 2, 4, ... (up to the plan's maximum) until the images/s stop growing by the plan's growth;
    the saturating concurrency and every point measured."""
    points: dict[int, Point] = {}
    c = 1
    while c <= plan.max_concurrency:
        points[c] = run_point(replace(load, concurrency=c), photos, expected, plan.search_seconds,
                              plan.search_warmup_s, plan.processes, log_watch)  # fmt: skip
        if not still_growing({k: p.images_per_s for k, p in points.items()}, plan.growth):
            break
        c *= 2
    return saturating_concurrency({k: p.images_per_s for k, p in points.items()}, plan.growth), points


def sweep(url: str, model: str, photos: Sequence[bytes], images_per_request: int, plan: Plan = Plan(),
          concurrency: int | None = None, log_path: Path | None = None,
          rss: Callable[[], dict[str, int]] | None = None) -> Sweep:  # fmt: skip
    """The sweep (see the module's description): the reference answers, the saturating concurrency (unless
    ``concurrency`` gives it), a point per factor, then a readiness check and one request checked."""
    expected = reference(url, model, photos, plan.timeout_s)
    watch = LogWatch(log_path)  # from here on: the reference requests (the first of the server's life) are before
    load = Load(url, model, batches_of(len(photos), images_per_request), 1, plan.backoff_s, plan.timeout_s)
    search: dict[int, Point] = {}
    if concurrency is None:
        concurrency, search = find_saturation(load, photos, expected, plan, watch)
    log.info("%s at %d images/request: saturating concurrency %d (search: %s)", model, images_per_request,
             concurrency, {c: p.images_per_s for c, p in search.items()} or "skipped")  # fmt: skip
    points = {}
    for k in plan.factors:
        c = max(1, round(k * concurrency))
        points[k] = run_point(replace(load, concurrency=c), photos, expected, plan.seconds,
                              plan.warmup_s, plan.processes, watch, rss)  # fmt: skip
    result = Sweep(model, images_per_request, concurrency, search, points)
    result.ready_after, result.answered_after = after_check(load, photos, expected)
    result.log_after = watch.take()
    return result


# ---------------------------------------------------------------------- the command line
def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The sweep's settings (``python -m scripts.overload sweep --help``)."""
    plan = Plan()
    parser.add_argument("--url", help="gRPC URL of a running server (default: start one on this checkout's models)")
    parser.add_argument("--log", type=Path, help="with --url: its Triton log, to count the E and W lines")
    parser.add_argument("--model", default="classify")
    parser.add_argument("--images-per-request", type=int, default=8)
    parser.add_argument("--concurrency", type=int, help="the saturating concurrency (default: searched)")
    parser.add_argument("--factors", default=",".join(f"{k:g}" for k in plan.factors), help="of the saturating one")
    parser.add_argument("--seconds", type=float, default=plan.seconds, help="each point, after its warm-up")
    parser.add_argument("--backoff-ms", type=float, default=plan.backoff_s * 1000, help="after a refused request")
    parser.add_argument("--processes", type=int, default=plan.processes, help="client processes (0: threads here)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    return parser


def run(args: argparse.Namespace) -> dict[str, Any]:
    """The sweep against ``--url``, or against a server of its own on this checkout's repository; the figures."""
    from .loadgen import memory
    from .photos import encode, load_photos
    from .servers import running_server

    photos = [encode(arr, "JPEG", quality=90) for arr in load_photos().values()]
    plan = Plan(factors=tuple(float(k) for k in args.factors.split(",")), seconds=args.seconds,
                backoff_s=args.backoff_ms / 1000, processes=args.processes)  # fmt: skip
    if args.url:
        found = sweep(args.url, args.model, photos, args.images_per_request, plan, args.concurrency, args.log)
        return found.figures()
    with tempfile.TemporaryDirectory(prefix="tritonprep-sweep-") as tmp:
        log_path = Path(tmp) / "tritonserver.log"
        with running_server(log_path) as (server, _):
            found = sweep(server.options.grpc_url, args.model, photos, args.images_per_request, plan,
                          args.concurrency, log_path, lambda: memory(server))  # fmt: skip
    return found.figures()
