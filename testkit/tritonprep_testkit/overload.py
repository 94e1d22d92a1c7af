"""Overload: measure capacity, then offer ``--factor`` times that rate, and report.

    python -m scripts.overload                     # 10x overload of `classify` for 10 s
    python -m scripts.overload --model preprocess --factor 10 --seconds 20

First ``--clients`` closed-loop threads measure the sustainable rate. Then requests are
sent open-loop (asynchronously, at a fixed rate, regardless of answers) at ``--factor``
times that rate for ``--seconds``, in ``--rounds`` rounds. Reported per round: how many
were served and how many rejected
(by reason), how fast rejections came back (p50/p99), latency of the served ones, requests
that got no answer before the client deadline (must be 0), and the resident memory of
tritonserver and its stubs at peak and after. The peak must level off from one round to the
next (bounded, not growing with the duration); the first round is the warm-up. The figure
"after" is for reading only: tritonserver's resident memory right after a round swings by
~75 MB from round to round as the allocator gives pages back or not. ``--json FILE`` writes
the figures.
"""

from __future__ import annotations

import argparse
import functools
import os
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from tritonprep_client import image_input

from .loadgen import GrpcSender, Outcome, categorize, images, memory, percentile, run_threads, scenario_settings
from .servers import running_server


def capacity(url: str, model: str, photo: bytes, clients: int, seconds: float) -> tuple[float, float]:
    """Closed-loop rate (requests/s) and median latency with ``clients`` threads."""
    done: list[Outcome] = []
    stop = threading.Event()

    def client(i: int) -> None:
        sender = GrpcSender(url)
        while not stop.is_set():
            done.append(sender.send(model, [photo], "good", 30))
        sender.close()

    threads = run_threads(clients, client)
    time.sleep(1.0)  # warm-up
    n0, t0 = len(done), time.monotonic()
    time.sleep(seconds)
    n1, t1 = len(done), time.monotonic()
    stop.set()
    for t in threads:
        t.join(35)
    ok = [o.latency for o in done[n0:n1] if o.category == "ok"]
    return (n1 - n0) / (t1 - t0), percentile(ok, 50)


def _send_share(
    url: str, model: str, photo: bytes, rate: float, total: int, phase: float, timeout_s: float
) -> tuple[list[Outcome], float]:
    """One sender process: ``total`` requests at ``rate`` per second, starting ``phase`` of an interval
    late, without waiting for answers; returns the outcomes and how far it fell behind schedule (s)."""
    from tritonclient.utils import InferenceServerException

    sender = GrpcSender(url)
    inp = image_input([photo], sender.m)
    outcomes: list[Outcome] = []
    lock = threading.Lock()
    answered = threading.Semaphore(0)

    def callback(start: float, result: Any = None, error: InferenceServerException | None = None) -> None:
        end = time.monotonic()
        if error is None:
            o = Outcome("good", start, end, "ok")
        else:
            status, message = str(error.status() or ""), str(error.message() or error)
            o = Outcome("good", start, end, categorize(status, message), f"{status} {message}"[:200])
        with lock:
            outcomes.append(o)
        answered.release()

    lag = 0.0
    t0 = time.monotonic() + phase / rate
    for i in range(total):
        due = t0 + i / rate
        now = time.monotonic()
        if due > now:
            time.sleep(due - now)
        else:
            lag = max(lag, now - due)
        start = time.monotonic()
        sender.client.async_infer(model, [inp], callback=functools.partial(callback, start), client_timeout=timeout_s)
    deadline = time.monotonic() + timeout_s + 10
    for _ in range(total):
        if not answered.acquire(timeout=max(0.0, deadline - time.monotonic())):
            break
    sender.close()
    with lock:
        return list(outcomes), lag


def open_loop(
    url: str, model: str, photo: bytes, rate: float, seconds: float, timeout_s: float, server: Any, senders: int = 1
) -> tuple[list[Outcome], dict[str, int], float]:
    """Send at ``rate`` per second for ``seconds`` from ``senders`` processes (one gRPC client each:
    one Python client cannot offer thousands of requests per second on time), without waiting for
    answers; return the outcomes, the peak resident memory meanwhile (``total`` and each process,
    sampled every 0.25 s), and how far the slowest sender fell behind its schedule (a large lag
    means the figures measure the client, not the server)."""
    import multiprocessing as mp

    share = int(rate * seconds) // senders
    peak: dict[str, int] = {}

    def sample() -> None:
        now = memory(server)
        for key, value in [*now.items(), ("total", sum(now.values()))]:
            peak[key] = max(peak.get(key, 0), value)

    sample()
    with mp.get_context("spawn").Pool(senders) as pool:
        pending = pool.starmap_async(
            _send_share, [(url, model, photo, rate / senders, share, k / senders, timeout_s) for k in range(senders)]
        )
        while not pending.ready():
            sample()
            pending.wait(0.25)
        results = pending.get()
    sample()
    outcomes = [o for part, _ in results for o in part]
    return outcomes, peak, max(lag for _, lag in results)


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Measure capacity, then ``args.rounds`` rounds of overload; return the figures."""
    photo = images()["good"][0]
    rounds = []
    with (
        tempfile.TemporaryDirectory(prefix="tritonprep-overload-") as tmp,
        running_server(Path(tmp) / "tritonserver.log") as (server, _),
    ):
        url = server.options.grpc_url
        mem_before = memory(server)
        rate, p50 = capacity(url, args.model, photo, args.clients, args.capacity_seconds)
        offered = rate * args.factor
        for _ in range(args.rounds):
            t0 = time.monotonic()
            outcomes, peak, lag = open_loop(
                url, args.model, photo, offered, args.seconds, args.timeout, server, args.senders
            )
            elapsed = time.monotonic() - t0
            time.sleep(1.0)
            rounds.append((outcomes, peak, elapsed, memory(server), lag))
        ready = server.is_ready()
        after = GrpcSender(url).send(args.model, [photo], "good", 30).category
    mb = 1 << 20
    sent = int(offered * args.seconds) // args.senders * args.senders
    figures: dict[str, Any] = {
        "model": args.model,
        "capacity_req_per_s": round(rate, 1),
        "capacity_latency_p50_s": round(p50, 3),
        "offered_req_per_s": round(offered, 1),
        "rss_before_mb": round(sum(mem_before.values()) / mb, 1),
        "rounds": [],
    }
    for outcomes, peak, elapsed, mem_after, lag in rounds:
        rejected = [o.latency for o in outcomes if o.category in ("queue-full", "queue-timeout")]
        served = [o.latency for o in outcomes if o.category == "ok"]
        figures["rounds"].append(
            {
                "sent": sent,
                "answered": len(outcomes),
                "unanswered": sent - len(outcomes),
                "outcomes": dict(Counter(o.category for o in outcomes)),
                "served_req_per_s": round(len(served) / elapsed, 1),
                "sender_max_lag_s": round(lag, 3),
                "rejection_latency_p50_s": round(percentile(rejected, 50), 4),
                "rejection_latency_p99_s": round(percentile(rejected, 99), 4),
                "served_latency_p50_s": round(percentile(served, 50), 3),
                "served_latency_p99_s": round(percentile(served, 99), 3),
                "rss_peak_mb": round(peak["total"] / mb, 1),
                "rss_peak_by_process_mb": {k: round(v / mb, 1) for k, v in peak.items() if k != "total"},
                "rss_after_mb": round(sum(mem_after.values()) / mb, 1),
                "rss_after_by_process_mb": {k: round(v / mb, 1) for k, v in mem_after.items()},
                "sample_errors": sorted({o.message for o in outcomes if o.message})[:3],
            }
        )
    figures["ready_after"] = ready
    figures["request_after_overload"] = after
    return figures


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The scenario's settings (``python -m scripts.overload --help``)."""
    parser.add_argument("--model", default="classify", choices=["classify", "preprocess"])
    parser.add_argument("--factor", type=float, default=10.0, help="offered load / capacity")
    parser.add_argument("--seconds", type=float, default=10.0, help="duration of each round of overload")
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="rounds of overload (the first warms up; the peak memory must plateau after it)",
    )
    parser.add_argument("--clients", type=int, default=4, help="closed-loop threads measuring capacity")
    parser.add_argument("--capacity-seconds", type=float, default=5.0)
    parser.add_argument(
        "--senders",
        type=int,
        default=max(1, min(8, (os.cpu_count() or 2) // 2)),
        help="client processes sending the overload (default: half the cores, at most 8)",
    )
    parser.add_argument("--timeout", type=float, default=30.0, help="client deadline of each request (s)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    return parser


def settings(**overrides: object) -> argparse.Namespace:
    """The command line's defaults with ``overrides`` (for tests)."""
    return scenario_settings(add_arguments, [], overrides)
