"""Soak: many requests of every kind against one server; memory must not grow, errors only where expected.

    python -m scripts.soak --requests 100000          # the full soak
    python -m scripts.soak --requests 2000 --warmup 300

Traffic, on 127.0.0.1 only, until ``--requests`` have been sent or ``--max-seconds`` pass:

* ``good``: a valid image (every format) to ``preprocess`` or, one in ``--classify-every``, to
  the ``classify`` ensemble; must succeed;
* ``bad``: a corpus image that must be rejected (corrupt, truncated, bombs, wrong magic);
  must fail with the image's own error;
* ``deadline``: a valid image with a 0.1 s client deadline; may succeed or time out;
* ``abort``: an HTTP request whose client disconnects mid-body or before the answer;
* ``killed``: ``classify`` requests of client processes (10 per second each) that are
  SIGKILLed every ``--kill-every`` s with requests in flight.

Memory is sampled every second: the resident memory of tritonserver and of every stub
(/proc) and the CuPy pool of the preprocess instances when they use CuPy (from the metrics
endpoint). A process's resident memory swings by tens of MB with what it is decoding at
the moment (glibc keeps freed buffers), so "before" is the peak over the first
``--window`` share of the requests after ``--warmup`` (arenas and caches grown) and "after"
the peak over the last ``--window`` share. Passes when that growth stays under
``--max-growth-mb``, no request got an unexpected answer, the server
answered every liveness probe, and it was never restarted. Runs on the CPU path as is and
on a GPU machine unchanged. ``--json FILE`` writes the figures.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import random
import socket
import struct
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

from tritonprep_client import image_input

from .loadgen import GrpcSender, Outcome, images, memory, percentile, run_threads, scenario_settings
from .servers import running_server

EXPECTED = {"good": {"ok"}, "bad": {"rejected-input"}, "deadline": {"ok", "client-deadline"}}
MB = 1 << 20


# ---------------------------------------------------------------------- clients that get killed
def victim(url: str, photo: bytes, sent: Any) -> None:
    """A client process that sends ``classify`` requests (10 per second, up to 4 in flight) until it is
    SIGKILLed, which leaves requests in flight; ``sent``: its own count of them (a lock-free shared value, which
    only it writes)."""
    sender = GrpcSender(url)
    inp = image_input([photo], sender.m)
    slots = threading.Semaphore(4)
    while True:
        slots.acquire()
        sent.value += 1  # its own counter, without a lock: a SIGKILL must not leave a shared lock held
        sender.client.async_infer("classify", [inp], callback=lambda *a, **k: slots.release(), client_timeout=30)
        time.sleep(0.1)


def http_abort(host: str, port: int, photo: bytes, mid_body: bool) -> None:
    """Send an HTTP binary inference request and vanish (TCP reset) mid-body or before the answer."""
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "IMAGE",
                    "shape": [1, 1],
                    "datatype": "BYTES",
                    "parameters": {"binary_data_size": len(photo) + 4},
                }
            ]
        }
    ).encode()
    body = header + struct.pack("<I", len(photo)) + photo
    head = (
        f"POST /v2/models/preprocess/infer HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/octet-stream\r\n"
        f"Inference-Header-Content-Length: {len(header)}\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    with socket.create_connection((host, port), timeout=5) as s:
        s.sendall(head + (body[: len(body) // 2] if mid_body else body))
        if not mid_body:
            time.sleep(0.005)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # RST on close


# ---------------------------------------------------------------------- figures
def cupy_pool(server: Any) -> dict[str, float]:
    """CuPy pool bytes of the preprocess instances (empty without CuPy)."""
    out: dict[str, float] = {}
    for line in server.metrics_text().splitlines():
        if line.startswith("tritonprep_cupy_pool_bytes{"):
            labels, _, value = line.rpartition(" ")
            kind = labels.split('kind="', 1)[1].split('"', 1)[0]
            out[kind] = out.get(kind, 0.0) + float(value)
    return out


def peak(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """The sample with the largest total resident memory (the window's peak working set)."""
    return max(samples, key=lambda s: s["rss_total_mb"] + sum(s["cupy_pool_mb"].values()))


def snapshot(server: Any) -> dict[str, Any]:
    """Memory of every process and the CuPy pool."""
    rss = memory(server)
    return {
        "rss_mb": {k: round(v / MB, 1) for k, v in rss.items()},
        "rss_total_mb": round(sum(rss.values()) / MB, 1),
        "cupy_pool_mb": {k: round(v / MB, 1) for k, v in cupy_pool(server).items()},
    }


def soak(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """Run the soak and return its figures."""
    pool = images()
    good, bad = pool["good"], pool["bad"]
    rng = random.Random(args.seed)
    outcomes: list[Outcome] = []
    lock = threading.Lock()
    counter = {"sent": 0, "abort": 0}
    stop = threading.Event()
    liveness = {"probes": 0, "failures": 0}
    with running_server(workdir / "tritonserver.log", supervise=True, max_restarts=1000) as (server, supervisor):
        assert supervisor is not None
        url, host, http_port = server.options.grpc_url, server.options.host, server.options.http_port
        budget = threading.Semaphore(args.requests)
        t_end = time.monotonic() + args.max_seconds

        def take() -> bool:
            if stop.is_set() or time.monotonic() > t_end or not budget.acquire(blocking=False):
                return False
            with lock:
                counter["sent"] += 1
            return True

        def client(i: int) -> None:
            r = random.Random(args.seed * 1000 + i)
            sender = GrpcSender(url)
            n = 0
            while take():
                n += 1
                roll = r.random()
                if roll < args.bad:
                    o = sender.send("preprocess", [r.choice(bad)], "bad", 30)
                elif roll < args.bad + args.deadline:
                    o = sender.send("preprocess", [r.choice(good)], "deadline", 0.1)
                elif roll < args.bad + args.deadline + args.abort:
                    try:
                        http_abort(host, http_port, r.choice(good), mid_body=n % 2 == 0)
                    except OSError:
                        pass
                    with lock:
                        counter["abort"] += 1
                    continue
                else:
                    model = "classify" if n % args.classify_every == 0 else "preprocess"
                    o = sender.send(model, [r.choice(good)], "good", 30)
                with lock:
                    outcomes.append(o)
            sender.close()

        samples: list[tuple[int, dict[str, Any]]] = []  # (requests sent, snapshot)

        def probe() -> None:
            while not stop.wait(1.0):
                with lock:
                    sent = counter["sent"]
                if sent >= args.warmup:
                    samples.append((sent, snapshot(server)))
                liveness["probes"] += 1
                try:
                    with urllib.request.urlopen(f"{server.options.http_url}/v2/health/live", timeout=5) as r:
                        ok = r.status == 200
                except OSError:
                    ok = False
                liveness["failures"] += 0 if ok else 1

        ctx = mp.get_context("spawn")
        victims_sent: list[Any] = []  # one lock-free counter per victim, read once it is gone
        killed = {"processes": 0}

        def killer() -> None:
            while not stop.is_set() and args.kill_every > 0:
                victims_sent.append(ctx.RawValue("l", 0))
                p = ctx.Process(target=victim, args=(url, rng.choice(good), victims_sent[-1]), daemon=True)
                p.start()
                stop.wait(args.kill_every)
                p.kill()
                p.join()
                killed["processes"] += 1

        t0 = time.monotonic()
        threads = (
            run_threads(args.clients, client) + run_threads(1, lambda i: probe()) + run_threads(1, lambda i: killer())
        )
        last_report = time.monotonic()
        while any(t.is_alive() for t in threads[: args.clients]):
            time.sleep(1.0)
            if args.progress and time.monotonic() - last_report > args.progress and samples:
                last_report = time.monotonic()
                sys.stderr.write(f"soak: {counter['sent']} sent, {samples[-1][1]['rss_total_mb']} MB\n")
        stop.set()
        for t in threads:
            t.join(60)
        elapsed = time.monotonic() - t0
        sent_total = counter["sent"]
        if not samples:  # nothing to compare: say so rather than report a growth of 0
            raise RuntimeError(
                f"the soak took no memory sample after its warm-up: {sent_total} requests sent in {elapsed:.0f} s, "
                f"--warmup {args.warmup}; send more (--requests) or run longer (--max-seconds)"
            )
        span = max(1, sent_total - args.warmup)
        first = [s for n, s in samples if n <= args.warmup + args.window * span] or [samples[0][1]]
        last = [s for n, s in samples if n >= sent_total - args.window * span] or [snapshot(server)]
        baseline, final = peak(first), peak(last)
        restarts = supervisor.restarts
        ready = server.is_ready()
    by_kind: dict[str, Counter] = {}
    unexpected = []
    for o in outcomes:
        by_kind.setdefault(o.kind, Counter())[o.category] += 1
        if o.category not in EXPECTED[o.kind]:
            unexpected.append(o)
    growth = round(final["rss_total_mb"] - baseline["rss_total_mb"], 1)
    pool_growth = round(sum(final["cupy_pool_mb"].values()) - sum(baseline["cupy_pool_mb"].values()), 1)
    killed_sent = sum(v.value for v in victims_sent)
    total = len(outcomes) + counter["abort"] + killed_sent
    good_lat = [o.latency for o in outcomes if o.kind == "good" and o.category == "ok"]
    return {
        "requests": total,
        "answered_requests": len(outcomes),
        "aborted_http_requests": counter["abort"],
        "killed_client_requests": killed_sent,
        "killed_client_processes": killed["processes"],
        "seconds": round(elapsed, 1),
        "requests_per_s": round(total / elapsed, 1),
        "outcomes_by_kind": {k: dict(v) for k, v in by_kind.items()},
        "unexpected": len(unexpected),
        "unexpected_samples": sorted({f"{o.kind}: {o.category}: {o.message}" for o in unexpected})[:5],
        "good_latency_p50_ms": round(percentile(good_lat, 50) * 1000, 1),
        "good_latency_p99_ms": round(percentile(good_lat, 99) * 1000, 1),
        "liveness_probes": liveness["probes"],
        "liveness_failures": liveness["failures"],
        "restarts": restarts,
        "ready_at_end": ready,
        "memory_samples": len(samples),
        "before": baseline,
        "after": final,
        "rss_growth_mb": growth,
        "cupy_pool_growth_mb": pool_growth,
        "max_growth_mb": args.max_growth_mb,
        "passed": (
            growth < args.max_growth_mb
            and pool_growth < args.max_growth_mb
            and not unexpected
            and liveness["failures"] == 0
            and restarts == 0
            and ready
        ),
    }


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The scenario's settings (``python -m scripts.soak --help``)."""
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--max-seconds", type=float, default=4 * 3600, help="stop early after this long")
    parser.add_argument("--warmup", type=int, default=2000, help="requests before memory is sampled")
    parser.add_argument("--window", type=float, default=0.1, help="share of the requests in each peak window")
    parser.add_argument("--clients", type=int, default=4, help="client threads")
    parser.add_argument("--bad", type=float, default=0.25, help="share of bad images")
    parser.add_argument("--deadline", type=float, default=0.15, help="share of 0.1 s deadlines")
    parser.add_argument("--abort", type=float, default=0.05, help="share of HTTP requests dropped mid-way")
    parser.add_argument("--classify-every", type=int, default=10, help="every n-th good request goes to classify")
    parser.add_argument("--kill-every", type=float, default=3.0, help="seconds between killed client processes")
    parser.add_argument("--max-growth-mb", type=float, default=50.0)
    parser.add_argument("--seed", type=int, default=6)
    parser.add_argument("--progress", type=float, default=0, help="print progress every N seconds")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    return parser


def settings(**overrides: object) -> argparse.Namespace:
    """The command line's defaults with ``overrides`` (for tests)."""
    return scenario_settings(add_arguments, [], overrides)


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Soak in a temporary folder; return the figures."""
    with tempfile.TemporaryDirectory(prefix="tritonprep-soak-") as tmp:
        return soak(args, Path(tmp))
