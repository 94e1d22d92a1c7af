"""Fault scenarios under load, with figures: a killed stub, an instance that fails itself, a drain.

    python -m scripts.faults kill-stub       # kill -9 the preprocess stub under load
    python -m scripts.faults fail-instance   # an executor reports an unrecoverable error
    python -m scripts.faults cuda-illegal-address   # (GPU) a real sticky CUDA error in preprocess
    python -m scripts.faults drain           # SIGTERM to `tritonprep serve` with requests in flight

kill-stub, fail-instance and cuda-illegal-address run a supervised embedded host (one tritonserver per GPU)
with load from ``--clients`` threads, each on a connection of its own, sending one photo per request to the
``classify`` ensemble, break the preprocess instance of one GPU's server (``--gpu``, default the last) after
``--warmup`` seconds, and report how long until that server answers again, what the requests in flight and
during the outage got, and on a multi-GPU host what the other GPUs answered meanwhile. drain starts
``tritonprep serve``, sends one request that holds preprocess for ``--sleep`` seconds and ``--clients`` - 1 that queue
behind it, sends SIGTERM once all are inside preprocess (Triton's pending count plus tritonprep's
executing gauge), and reports what they got and how long the launcher took to exit. ``--json FILE`` writes the figures.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import subprocess
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from tritonprep.launcher.probes import fetch_metrics, in_flight
from tritonprep.launcher.supervise import Supervisor, stub_processes
from tritonprep.triton import faults

from .loadgen import GrpcSender, Outcome, connect_to, images, percentile, run_threads, scenario_settings
from .servers import running_host, serve_command

log = logging.getLogger("faults")

#: what a request sent while an instance is out of service may get: an error, in time (one that queued
#: behind the failed batch may be answered by its 2 s queue timeout while the server restarts)
OUTAGE_ANSWERS = frozenset({"instance-failed", "stub-dead", "server-unavailable", "queue-timeout"})


def break_and_recover(
    scenario: str, args: argparse.Namespace, workdir: Path, gpu: int | None = None, *, cpu: bool = False
) -> dict[str, Any]:
    """Load, break the preprocess instance of one GPU's server (``gpu``; by default the last one's, on a one-GPU
    or CPU host the server's), wait until that server serves again, report. ``cpu``: serve on the CPU even on a GPU
    host (checks that read the CPU server's messages).

    The host runs one tritonserver per GPU, so on a multi-GPU host the others keep answering: every client
    thread has a connection of its own (the kernel spreads them over the servers), and the figures count what
    was answered during the outage, what failed, and what was in flight on the broken GPU's server.
    """
    photo = images()["good"][0]
    outcomes: list[Outcome] = []
    lock = threading.Lock()
    stop = threading.Event()
    env = {faults.ENV: "1"}
    # every model's config.pbtxt, also on a GPU: one preprocess instance per GPU, so breaking it is an outage of
    # that GPU's server (the GPU configuration runs four; killing one of them would leave the other three serving)
    log_path = workdir / "tritonserver.log"
    # queue_timeout_ms=0: the configs' own 2 s queue timeouts. The scenario holds the one preprocess instance for
    # 1.5 s so that requests are inside it when it breaks; the shipped 50 ms front-queue timeout would refuse the
    # trigger request in the queue behind them, and nothing would break.
    with running_host(log_path, supervise=True, supervisor_kw={"grace_s": args.grace}, env=env, model_config_name="",
                      mps=args.mps, queue_timeout_ms=0, gpus=() if cpu else None) as host:  # fmt: skip
        part = host.parts[-1] if gpu is None else next(p for p in host.parts if p.gpu == str(gpu))
        server, sup = part.server, part.supervisor
        assert sup is not None
        target = server.options.server_id  # None: the host's only server
        url = host.options.grpc_url

        def client(i: int) -> None:
            sender = GrpcSender(url, track=target is not None)
            try:
                while not stop.is_set():
                    o = sender.send("classify", [photo], "good", args.timeout)
                    with lock:
                        outcomes.append(o)
                    if o.category != "ok":
                        time.sleep(0.05)  # do not spin on an outage
                    if o.category == "server-unavailable":  # as a client would: a new connection, not gRPC's backoff
                        sender.close()
                        sender = GrpcSender(url, track=target is not None)
            finally:
                sender.close()

        threads = run_threads(args.clients, client)
        time.sleep(args.warmup)
        [stub] = [s for s in stub_processes(server.pid) if s.model == "preprocess"]  # type: ignore[arg-type]
        slow: list[Outcome] = []  # requests that are inside preprocess when it breaks

        def slow_client(i: int) -> None:
            sender = connect_to(url, target)
            slow.append(sender.send("classify", [faults.trigger("sleep:1.5", photo)], "in-preprocess", args.timeout))
            sender.close()

        slow_threads = run_threads(args.in_preprocess, slow_client)
        trigger = connect_to(url, target) if scenario != "kill-stub" else None
        time.sleep(0.5)
        t_break = time.monotonic()
        if trigger is None:
            os.kill(stub.pid, signal.SIGKILL)  # what `pkill -9 -f 'triton_python_backend_stub.*preprocess'` does
            trigger_outcome = None
        else:
            # fail-instance: the executor reports an unrecoverable error; cuda-illegal-address (GPU):
            # a real sticky CUDA error, which the GPU executor must turn into the same
            trigger_outcome = trigger.send("classify", [faults.trigger(scenario, photo)], "trigger", args.timeout)
            trigger.close()
        recovered = _recovered(url, target, sup, t_break, photo, args, outcomes, lock)
        time.sleep(args.after)
        stop.set()
        for t in threads + slow_threads:
            t.join(args.timeout + 5)
        hung = sum(t.is_alive() for t in threads + slow_threads)
        events = [(e.kind, round(e.time - t_break, 2), e.detail) for e in sup.events if e.time >= t_break]
        restarts = sup.restarts
        others = host.restarts - restarts
        ready_after = host.is_ready()
        mps_state = server.mps
        gpus = host.topology.count
    failure_t = next((t for k, t, _ in events if k == "failure"), None)
    ready_t = next((t for k, t, _ in events if k == "ready"), None)
    in_flight = [o for o in outcomes if o.start <= t_break < o.end]
    outage = [o for o in outcomes if o.start > t_break and (recovered is None or o.end < recovered)]
    after = [o for o in outcomes if recovered is not None and o.start >= recovered]
    ok_latency = [o.latency for o in outcomes if o.category == "ok" and o.end < t_break]
    return {
        "scenario": scenario,
        "gpus": gpus,
        "broken_gpu": part.gpu,
        "requests": len(outcomes),
        "stub_pid_broken": stub.pid,
        "trigger_request": None if trigger_outcome is None else trigger_outcome.category,
        "trigger_message": None if trigger_outcome is None else trigger_outcome.message[:300],
        "trigger_answered_after_s": None if trigger_outcome is None else round(trigger_outcome.end - t_break, 2),
        "detected_after_s": failure_t,
        "server_ready_again_after_s": ready_t,
        "requests_succeed_again_after_s": None if recovered is None else round(recovered - t_break, 2),
        "in_preprocess_at_break": dict(Counter(o.category for o in slow)),
        "in_preprocess_answered_after_s": round(max((o.end - t_break for o in slow), default=float("nan")), 2),
        "in_flight_at_break": dict(Counter(o.category for o in in_flight)),
        "in_flight_on_broken_gpu_at_break": sum(o.server == target for o in in_flight) if target else len(in_flight),
        "during_outage": dict(Counter(o.category for o in outage)),
        "after_recovery": dict(Counter(o.category for o in after)),
        "failed_requests": sum(o.category != "ok" for o in outcomes),
        "answered_per_s_before": _rate(outcomes, t_break - args.warmup / 2, t_break),
        "answered_per_s_during_outage": _rate(outcomes, t_break, recovered or t_break),
        "outage_latency_p99_s": round(percentile([o.latency for o in outage], 99), 3),
        "ok_latency_p50_before_s": round(percentile(ok_latency, 50), 3),
        "sample_errors": sorted({o.message for o in slow + in_flight + outage if o.message})[:6],
        "client_threads_hung": hung,
        "restarts": restarts,
        "other_gpus_restarts": others,
        "ready_at_end": ready_after,
        "supervisor_events": events,
        "mps": None if mps_state is None else mps_state.enabled,
        "restart_timeline": restart_timeline(log_path),
    }


def _rate(outcomes: list[Outcome], t0: float, t1: float) -> float:
    """Requests answered right per second between ``t0`` and ``t1`` (0.0 for an empty window)."""
    ok = sum(1 for o in outcomes if o.category == "ok" and t0 <= o.end < t1)
    return round(ok / (t1 - t0), 1) if t1 > t0 else 0.0


def _recovered(
    url: str,
    target: str | None,
    sup: Supervisor,
    t_break: float,
    photo: bytes,
    args: argparse.Namespace,
    outcomes: list[Outcome],
    lock: threading.Lock,
) -> float | None:
    """When the broken server answers again: with one server, the first request that succeeds after the break;
    with several (the others answer throughout), a request through a connection that reached it again, once its
    supervisor has restarted it. None after ``args.max_recovery`` seconds."""
    deadline = t_break + args.max_recovery
    while time.monotonic() < deadline:
        time.sleep(0.1)
        if target is None:
            with lock:  # a request can only succeed again through a live preprocess stub
                done = min((o.end for o in outcomes if o.start > t_break and o.category == "ok"), default=None)
            if done is not None:
                return done
        elif any(e.kind == "ready" and e.time > t_break for e in sup.events):
            probe = connect_to(url, target)
            answer = probe.send("classify", [photo], "probe", args.timeout)
            probe.close()
            if answer.category == "ok":
                return answer.end
    return None


#: the lines of a server log that time a restart: the watchdogs' and Triton's model loads and endpoints
_TIMELINE = ("tritonprep watchdog", "successfully loaded", "Started GRPCInferenceService", "Started HTTPService")


def restart_timeline(log_path: Path, limit: int = 60) -> list[str]:
    """The watchdogs' lines (millisecond times) and Triton's load and endpoint lines, from the first stop on."""
    try:
        lines = log_path.read_text(errors="replace").splitlines()
    except OSError:
        return []
    first = next(
        (i for i, line in enumerate(lines) if "tritonprep watchdog" in line and "stopping tritonserver" in line), None
    )
    if first is None:
        return []
    return [line.strip()[:200] for line in lines[first:] if any(k in line for k in _TIMELINE)][:limit]


def drain(args: argparse.Namespace, workdir: Path, *, cpu: bool = False) -> dict[str, Any]:
    """SIGTERM to `tritonprep serve` while slow requests are in flight (``cpu``: served on the CPU even on a GPU host,
    with the CPU config's one preprocess instance, behind which the other requests queue)."""
    photo = images()["good"][0]
    log_file = workdir / "serve.log"
    serve = serve_command(log_file, "--exit-timeout", str(args.exit_timeout), "--mps", args.mps)
    grpc, metrics = serve.grpc, serve.metrics
    proc = subprocess.Popen(
        serve.argv,
        env={**os.environ, faults.ENV: "1", **({"CUDA_VISIBLE_DEVICES": ""} if cpu else {})},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url = f"127.0.0.1:{grpc}"
        deadline = time.monotonic() + 180
        probe = GrpcSender(url)
        while not _ready(probe):
            if time.monotonic() > deadline or proc.poll() is not None:
                output = proc.stderr.read() if proc.stderr else ""
                raise RuntimeError(f"tritonprep serve did not become ready: {output}")
            time.sleep(0.25)
        probe.close()
        outcomes: list[Outcome] = []
        lock = threading.Lock()

        def send(i: int) -> None:
            # the first request holds the preprocess instance for --sleep seconds; the others queue
            # behind it (plain photos, quick once they run, so none waits near the 2 s queue timeout)
            image = faults.trigger(f"sleep:{args.sleep}", photo) if i == 0 else photo
            sender = GrpcSender(url)
            o = sender.send("classify", [image], "in-flight", args.timeout)
            sender.close()
            with lock:
                outcomes.append(o)

        threads = run_threads(1, send)
        _wait_in_preprocess(metrics, 1, timeout_s=10)  # the holder is inside preprocess
        threads += run_threads(args.clients - 1, lambda i: send(i + 1))
        in_preprocess = _wait_in_preprocess(metrics, args.clients, timeout_s=args.sleep / 2)
        t_term = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        late = GrpcSender(url).send("classify", [photo], "after-sigterm", 10)
        for t in threads:
            t.join(args.timeout + 5)
        code = proc.wait(timeout=args.exit_timeout + 30)
        exited_after = time.monotonic() - t_term
        output = proc.stderr.read() if proc.stderr else ""
    finally:
        if proc.poll() is None:
            proc.kill()
    return {
        "scenario": "drain",
        "in_flight_requests": args.clients,
        "in_preprocess_at_sigterm": in_preprocess,
        "in_flight_outcomes": dict(Counter(o.category for o in outcomes)),
        "in_flight_latency_max_s": round(max(o.latency for o in outcomes), 2),
        "request_after_sigterm": late.category,
        "request_after_sigterm_message": late.message,
        "launcher_exit_code": code,
        "clean_stop": "nothing left to kill" in output and "tritonserver stopped (exit code 0)" in output,
        "launcher_exited_after_s": round(exited_after, 2),
        "exit_timeout_s": args.exit_timeout,
    }


def _wait_in_preprocess(metrics_port: int, count: int, timeout_s: float) -> int:
    """Wait until ``count`` requests are queued or executing in preprocess (Triton's pending count plus
    tritonprep's executing gauge); return how many there are when the wait ends."""
    deadline = time.monotonic() + timeout_s
    while True:
        seen = int(in_flight(fetch_metrics("127.0.0.1", metrics_port), "preprocess"))
        if seen >= count or time.monotonic() > deadline:
            return seen
        time.sleep(0.05)


def _ready(sender: GrpcSender) -> bool:
    """True when the server answers that it is ready."""
    from tritonclient.utils import InferenceServerException

    try:
        return bool(sender.client.is_server_ready(client_timeout=2))
    except InferenceServerException:
        return False


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The scenarios' settings (``python -m scripts.faults --help``)."""
    parser.add_argument(
        "scenario", choices=["kill-stub", "fail-instance", "cuda-illegal-address", "drain", "isolation"],
        help="isolation: a sticky CUDA fault on one GPU of a multi-GPU host under full load (tritonprep_testkit."
        "isolation)",
    )  # fmt: skip
    parser.add_argument("--clients", type=int, default=4, help="concurrent client threads")
    parser.add_argument("--timeout", type=float, default=30.0, help="client deadline per request (s)")
    parser.add_argument("--warmup", type=float, default=3.0, help="seconds of load before the fault")
    parser.add_argument("--after", type=float, default=2.0, help="seconds of load after recovery")
    parser.add_argument("--max-recovery", type=float, default=120.0, help="give up waiting after (s)")
    parser.add_argument(
        "--in-preprocess", type=int, default=2, help="requests held inside preprocess (1.5 s) when it breaks"
    )
    parser.add_argument("--grace", type=float, default=2.0, help="supervisor: seconds for in-flight requests")
    parser.add_argument(
        "--sleep", type=float, default=1.5, help="drain: seconds the first in-flight request holds preprocess"
    )
    parser.add_argument("--exit-timeout", type=int, default=30, help="drain: Triton's exit timeout (s)")
    parser.add_argument("--mps", choices=["auto", "on", "off"], default="auto", help="CUDA MPS of the server")
    parser.add_argument(
        "--gpu", type=int, help="on a multi-GPU host, the GPU whose server breaks (default: the last one)"
    )
    parser.add_argument("--batch", type=int, default=8, help="isolation: images per request")
    parser.add_argument(
        "--fault", default="cuda-illegal-address", choices=["cuda-illegal-address", "fail-instance"],
        help="isolation: what breaks (fail-instance also serves on a CPU host of fake GPUs)",
    )  # fmt: skip
    parser.add_argument("--processes", type=int, default=8, help="isolation: load processes (--clients between them)")
    parser.add_argument("--load-seconds", type=float, default=20.0, help="isolation: seconds of load after the fault")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    return parser


def settings(scenario: str, **overrides: object) -> argparse.Namespace:
    """The command line's defaults for ``scenario``, with ``overrides`` (for tests)."""
    return scenario_settings(add_arguments, [scenario], overrides)


def quick_settings(scenario: str, **overrides: object) -> argparse.Namespace:
    """The settings the test suites use: fewer clients, shorter phases (``overrides`` on top)."""
    return settings(scenario, **{"clients": 3, "warmup": 2.0, "after": 1.0, "max_recovery": 90.0, **overrides})


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Run ``args.scenario`` in a temporary folder; return its figures."""
    with tempfile.TemporaryDirectory(prefix="tritonprep-faults-") as tmp:
        if args.scenario == "drain":
            return drain(args, Path(tmp))
        if args.scenario == "isolation":
            from .isolation import isolation

            return isolation(args, Path(tmp))
        return break_and_recover(args.scenario, args, Path(tmp), args.gpu)
