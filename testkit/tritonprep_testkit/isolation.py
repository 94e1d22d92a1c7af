"""Fault isolation on a multi-GPU host, measured: a sticky CUDA fault on one GPU under full load.

    python -m scripts.faults isolation --gpu 1 --batch 8 --clients 64 --processes 8

The host serves the shipped repository (the launcher's defaults: a tritonserver per GPU, MPS, the GPU configs)
with fault injection on. ``--processes`` load processes of ``--clients`` / ``--processes`` threads each send
``--batch`` images per request to ``classify``, every thread on a gRPC connection of its own (the kernel spreads
them over the servers) that it replaces after a failure, 0.25 s later, as the tritonprep client does (a request
that failed is counted, not sent again). After ``--warmup`` seconds one
request through a connection to GPU ``--gpu``'s server carries the ``--fault`` trigger: ``cuda-illegal-address``
(a kernel of that GPU's preprocess writes through a wild pointer, which poisons every CUDA client of that GPU's
MPS server) or ``fail-instance``.
The load goes on for ``--load-seconds`` seconds.

Figures: images/s answered in the 5 s before the fault, in the 15 s after it and their ratio (the goal: >= 0.4);
the failed requests against those in flight on the broken GPU when it broke; when that GPU's server answers
again (a request through a connection that reached it); whether any other GPU's server restarted; images/s per
second around the fault; the load processes' CPU time.
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing
import resource
import time
from collections import Counter
from pathlib import Path
from typing import Any

from tritonprep.triton import faults

from .loadgen import GrpcSender, connect_to
from .overload_sweep import OVERLOAD
from .photos import make_jpegs
from .servers import running_host

log = logging.getLogger("isolation")

#: a load thread's wait after a failed request (the tritonprep client's first backoff: 0.25 s, jittered)
BACKOFF_S = 0.25
#: seconds after the fault whose images/s the goal compares with the 5 s before
WINDOW_S = 15.0
BEFORE_S = 5.0


def _load(url: str, batches: list[list[bytes]], threads: int, stop: Any, out: Any, timeout_s: float) -> None:
    """One load process: ``threads`` senders in a loop until ``stop``; its outcomes and CPU time go to ``out``."""
    import threading

    results: list[Result] = []
    lock = threading.Lock()

    def sender_loop(i: int) -> None:
        sender = GrpcSender(url, track=True)
        k = i
        while not stop.is_set():
            batch = batches[k % len(batches)]
            k += 1
            o = sender.send("classify", batch, "load", timeout_s)
            with lock:
                results.append((o.start, o.end, o.category, o.server, len(batch)))
            if o.category != "ok":  # as the tritonprep client does: a backoff, then a new connection (which the
                sender.close()  # kernel may give to another GPU's server)
                time.sleep(BACKOFF_S)
                sender = GrpcSender(url, track=True)
        sender.close()

    workers = [threading.Thread(target=sender_loop, args=(i,), daemon=True) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout_s + 10)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    out.put((results, usage.ru_utime + usage.ru_stime))


Result = tuple[float, float, str, str, int]  # start, end, category, server, images


def _rate(results: list[Result], t0: float, t1: float) -> float:
    """Images answered right per second between ``t0`` and ``t1``."""
    images = sum(n for _, end, category, _, n in results if category == "ok" and t0 <= end < t1)
    return round(images / (t1 - t0), 1) if t1 > t0 else 0.0


def isolation(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """Run the scenario (see the module's description); its figures."""
    if args.load_seconds < WINDOW_S:
        raise ValueError(f"--load-seconds {args.load_seconds}: at least {WINDOW_S:.0f} (the window after the fault)")
    photos = make_jpegs(500, 375, 64, seed=42)
    batches = [[photos[(i * args.batch + j) % len(photos)] for j in range(args.batch)] for i in range(len(photos))]
    log_path = workdir / "tritonserver.log"
    ctx = multiprocessing.get_context("spawn")
    with running_host(log_path, supervise=True, env={faults.ENV: "1"}, mps=args.mps) as host:
        if len(host.parts) < 2:
            raise RuntimeError("isolation needs a host of several GPUs (a server per GPU)")
        part = host.parts[-1] if args.gpu is None else next(p for p in host.parts if p.gpu == str(args.gpu))
        target, sup, url = part.server.options.server_id, part.supervisor, host.options.grpc_url
        assert sup is not None and target is not None
        stop, out = ctx.Event(), ctx.Queue()
        threads = max(1, args.clients // args.processes)
        procs = [ctx.Process(target=_load, args=(url, batches, threads, stop, out, args.timeout), daemon=True)
                 for _ in range(args.processes)]  # fmt: skip
        for p in procs:
            p.start()
        t_load = time.monotonic()
        time.sleep(args.warmup)
        trigger = connect_to(url, target)
        t_first = time.monotonic()
        while True:  # refused at a full queue (the load saturates the GPU): sent again, as a client that retries does
            t_fault = time.monotonic()  # the fault counts from the send that got in
            answer = trigger.send("classify", [faults.trigger(args.fault, photos[0])], "trigger", args.timeout)
            if answer.category not in OVERLOAD or time.monotonic() >= t_first + args.timeout:
                break
            time.sleep(0.01)
        trigger.close()
        if answer.category in OVERLOAD:
            stop.set()
            for p in procs:
                p.terminate()
                p.join(10)
            raise RuntimeError(
                f"the trigger request was refused for overload for {args.timeout:.0f} s ({answer.category}): nothing "
                f"broke; run with fewer --clients"
            )
        serves_again = None
        deadline = t_fault + max(args.load_seconds, args.max_recovery)
        while time.monotonic() < deadline:
            time.sleep(0.2)
            if serves_again is None and any(e.kind == "ready" and e.time > t_fault for e in sup.events):
                probe = connect_to(url, target)
                if probe.send("classify", [photos[0]], "probe", args.timeout).category == "ok":
                    serves_again = time.monotonic()
                probe.close()
            if serves_again is not None and time.monotonic() >= t_fault + args.load_seconds:
                break
        stop.set()
        collected = [out.get(timeout=args.timeout + 30) for _ in procs]
        for p in procs:
            p.join(10)
        events = [(e.kind, round(e.time - t_fault, 2), e.detail) for e in sup.events if e.time >= t_fault]
        others = host.restarts - sup.restarts
        t_end = time.monotonic()
    results = [r for rs, _ in collected for r in rs]
    first_answer = min((r[1] for r in results), default=t_fault)
    before_from = max(t_fault - BEFORE_S, first_answer, t_load)  # only seconds the load already ran
    before = _rate(results, before_from, t_fault)
    after = _rate(results, t_fault, t_fault + WINDOW_S)
    failed = [r for r in results if r[2] != "ok"]
    in_flight = [r for r in results if r[0] <= t_fault < r[1] and r[3] == target]
    seconds = range(int(-BEFORE_S), int(min(args.load_seconds, t_end - t_fault)))
    return {
        "scenario": "isolation",
        "gpus": len(host.parts),
        "broken_gpu": part.gpu,
        "images_per_request": args.batch,
        "clients": threads * args.processes,
        "load_processes": args.processes,
        "load_cpu_cores": round(sum(cpu for _, cpu in collected) / (t_end - t_fault + args.warmup), 2),
        "trigger_request": answer.category,
        "images_per_s_before": before,
        "before_window_s": round(t_fault - before_from, 2),
        "images_per_s_15s_after": after,
        "after_over_before": round(after / before, 3) if before else None,
        "failed_requests": len(failed),
        "failed_by_category": dict(Counter(r[2] for r in failed)),
        "failed_on_broken_gpu": sum(r[3] == target for r in failed),
        "in_flight_on_broken_gpu_at_fault": len(in_flight),
        "broken_gpu_serves_again_after_s": None if serves_again is None else round(serves_again - t_fault, 2),
        "other_gpus_restarts": others,
        "supervisor_events": events,
        "images_per_s_by_second": [_rate(results, t_fault + s, t_fault + s + 1) for s in seconds],
    }
