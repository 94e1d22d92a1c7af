"""``tritonprep serve``: the embedded server in the foreground, supervised, until SIGINT or SIGTERM.

``tritonprep serve [OPTIONS] [-- TRITONSERVER ARGS]`` and ``python -m tritonprep.launcher [serve] ...``
take the same arguments: an option this parser does not know is a usage error, and only what follows
``--`` goes to tritonserver as it is. A SIGINT or SIGTERM at any moment, start-up included, is a
requested stop: the requests in flight finish (at most the exit timeout), tritonserver stops, and the
exit code is 0.

Exit codes: 0 a requested stop; 1 a server that started and failed (or kept failing); 2 nothing was started,
said in one line: a usage error, an option that cannot be served, or a check of :mod:`.preflight` (a port in
use, no model repository, no network runtime).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from ..errors import ServerError, StartRefused
from . import logs, preflight
from .host import Host
from .options import (
    ADMIN_HEADER,
    ADMIN_KEY_ENV,
    DEFAULT_REPOSITORY,
    MPS_MODES,
    RESTRICTED_APIS,
    SERVER_LAYOUTS,
    ServerOptions,
)
from .summary import summary

log = logging.getLogger(__name__)

#: what a requested stop may take beyond the exit timeout (tritonserver unloads its models, then SIGKILL)
STOP_MARGIN_S = 5.0


def gpu_list(text: str) -> tuple[int, ...]:
    """argparse type of ``--gpus``: distinct non-negative indices, e.g. ``0,2``."""
    try:
        ids = tuple(int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected GPU indices like 0,1, got {text!r}") from None
    if not ids or min(ids) < 0 or len(set(ids)) != len(ids):
        raise argparse.ArgumentTypeError(f"GPU indices must be distinct and >= 0, got {text!r}")
    return ids


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    """Arguments of ``tritonprep serve``."""
    p = parser or argparse.ArgumentParser(
        prog="tritonprep serve",
        usage="%(prog)s [options] [-- tritonserver args]",
        description="Run the embedded Triton server.",
        epilog="Arguments after -- go to tritonserver as they are.",
    )
    p.add_argument("--model-repository", type=Path, default=DEFAULT_REPOSITORY, help="default: %(default)s")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: %(default)s; 0.0.0.0 exposes it)")
    p.add_argument("--http-port", type=int, default=8000)
    p.add_argument("--grpc-port", type=int, default=8001)
    p.add_argument(
        "--metrics-port",
        type=int,
        default=8002,
        help="Triton's metrics; with one server per GPU, the host endpoint: every GPU's metrics and the host's "
        "health (default: %(default)s)",
    )
    p.add_argument(
        "--model-config-name",
        help="use <model>/configs/<NAME>.pbtxt where present (default: gpu where a GPU is visible, which gives "
        "preprocess its GPU instances and batching; else each model's config.pbtxt)",
    )
    p.add_argument("--cuda-memory-pool-mb", type=int, default=1536, help="per GPU (default: %(default)s)")
    p.add_argument(
        "--queue-timeout-ms",
        type=int,
        default=50,
        help="on GPUs: refuse a request that waited longer than this in an ensemble's first queue, bounding the "
        "latency of what is admitted under overload; 0 keeps the configs' timeouts (default: %(default)s)",
    )
    p.add_argument(
        "--gpus",
        type=gpu_list,
        help="comma-separated GPU indices to serve on, e.g. 0,2 (default: every GPU this process sees, after "
        "CUDA_VISIBLE_DEVICES); each GPU model gets its instance count on each",
    )
    p.add_argument(
        "--servers",
        choices=SERVER_LAYOUTS,
        default="per-gpu",
        help="per-gpu (default): one tritonserver per GPU, on shared HTTP and gRPC ports, so a request stays on "
        "one GPU and a fault costs one GPU; one: one tritonserver over every GPU",
    )
    p.add_argument(
        "--gpu-metrics-port",
        type=int,
        metavar="PORT",
        help="with one server per GPU: the first GPU's own metrics port, the next GPU's PORT+1, ... "
        "(default: --metrics-port + 1)",
    )
    p.add_argument("--log-verbose", type=int, default=0)
    p.add_argument("--log-file", type=Path, help="write Triton's log here instead of the terminal")
    p.add_argument("--ready-timeout", type=float, default=600.0, help="seconds to wait for the models")
    p.add_argument("--exit-timeout", type=int, default=30, help="seconds in-flight requests get on shutdown")
    gpu = p.add_argument_group("GPU")
    gpu.add_argument(
        "--mps",
        choices=MPS_MODES,
        default="auto",
        help="CUDA MPS for the instances, a private daemon per start: auto (default: where a GPU and "
        "nvidia-cuda-mps-control are; else without, said in one line), on (or fail), off",
    )
    gpu.add_argument(
        "--gpu-memory-budget",
        default="auto",
        metavar="SIZE|auto|off",
        help="GPU memory per GPU for tritonserver and the instances (16G, 12000M): lowers instance counts, then "
        "the largest batch bucket, of the models that declare gpu_memory_mb until they fit (auto, the default: "
        "each GPU's total less a margin; off: the configs as they are)",
    )
    sec = p.add_argument_group("security")
    sec.add_argument(
        "--admin-key-file",
        type=Path,
        help=f"file holding the value of the {ADMIN_HEADER} header that opens the repository, "
        "model-config, shared-memory, statistics, trace and logging APIs "
        f"(default: ${ADMIN_KEY_ENV}, else a random value per start, which closes them)",
    )
    sec.add_argument("--unrestricted", action="store_true", help="leave every API open (trusted networks only)")
    sec.add_argument("--grpc-tls-cert", type=Path, help="PEM certificate: serve gRPC over TLS")
    sec.add_argument("--grpc-tls-key", type=Path, help="PEM private key of --grpc-tls-cert")
    sec.add_argument("--grpc-tls-root-cert", type=Path, help="PEM CA: require client certificates (mutual TLS)")
    sup = p.add_argument_group("supervision")
    sup.add_argument("--no-supervise", action="store_true", help="exit instead of restarting a failed server")
    sup.add_argument("--max-restarts", type=int, default=5, help="restarts allowed within 10 minutes (default: 5)")
    p.add_argument("triton_args", nargs="*", metavar="-- TRITONSERVER ARGS", help="tritonserver's own arguments")
    return p


def parse_args(argv: Sequence[str], parser: argparse.ArgumentParser | None = None) -> argparse.Namespace:
    """Parse ``[serve] [options] [-- tritonserver args]``; an unknown option is a usage error (exit 2).

    The leading ``serve`` is what ``python -m tritonprep.launcher serve`` passes.
    """
    argv = list(argv)
    if argv[:1] == ["serve"]:
        argv = argv[1:]
    own, extra = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    parser = parser or build_parser()
    args = parser.parse_args(own)
    if args.triton_args:  # a word that is no option of ours, before any --
        parser.error(f"unrecognized arguments: {' '.join(args.triton_args)} (tritonserver's own go after --)")
    args.triton_args = extra
    return args


def options_from_args(args: argparse.Namespace) -> ServerOptions:
    """Turn parsed arguments into :class:`ServerOptions`."""
    if args.admin_key_file is not None:
        try:
            admin_key: str | None = args.admin_key_file.read_text().strip()
        except OSError as e:
            raise ServerError(f"cannot read --admin-key-file {args.admin_key_file}: {e.strerror}") from None
    else:
        admin_key = os.environ.get(ADMIN_KEY_ENV) or None
    return ServerOptions(
        model_repository=args.model_repository.resolve(),
        host=args.host,
        http_port=args.http_port,
        grpc_port=args.grpc_port,
        metrics_port=args.metrics_port,
        model_config_name=args.model_config_name,
        log_verbose=args.log_verbose,
        cuda_memory_pool_mb=args.cuda_memory_pool_mb,
        queue_timeout_ms=args.queue_timeout_ms,
        gpus=args.gpus,
        exit_timeout_s=args.exit_timeout,
        extra_args=tuple(args.triton_args),
        restricted_apis=() if args.unrestricted else RESTRICTED_APIS,
        admin_key=admin_key,
        grpc_tls_cert=args.grpc_tls_cert,
        grpc_tls_key=args.grpc_tls_key,
        grpc_tls_root_cert=args.grpc_tls_root_cert,
        mps=args.mps,
        gpu_memory_budget=args.gpu_memory_budget,
        servers=args.servers,
        gpu_metrics_ports=None
        if args.gpu_metrics_port is None
        else tuple(args.gpu_metrics_port + k for k in range(16)),
    )


def log_ready(host: Host, args: argparse.Namespace) -> None:
    """The lines a user reads once the host is ready: endpoints, models, the admin APIs, the summary."""
    options = host.options
    log.info(
        "tritonserver ready: HTTP %s  gRPC %s%s  metrics http://%s:%d/metrics",
        options.http_url,
        options.grpc_url,
        " (TLS)" if options.grpc_tls_cert else "",
        options.host,
        options.metrics_port,
    )
    log.info("models ready: %s", ", ".join(n for n, ok in host.model_states().items() if ok) or "none")
    if options.restricted_apis:
        source = (
            ("--admin-key-file" if args.admin_key_file else f"${ADMIN_KEY_ENV}")
            if options.admin_key
            else "a random value (set --admin-key-file or $" + ADMIN_KEY_ENV + " to use them)"
        )
        apis = ",".join(options.restricted_apis)
        log.info("restricted APIs (%s) need the header %s: %s", apis, options.admin_header, source)
    log.info("%s", summary(host))
    log.info("try: tritonprep classify photo.jpg --url %s", options.grpc_url)


def run_until_stopped(host: Host, supervised: bool, stopping: threading.Event) -> int:
    """Wait for a stop request; 1 if the host fails for good first (every supervisor gave up, or without
    supervision a server exited)."""
    while not stopping.is_set():
        if supervised and host.gave_up:
            log.error("tritonserver keeps failing; giving up")
            return 1
        if not supervised and not host.running:
            log.error("tritonserver exited unexpectedly with code %s", host.poll())
            return 1
        stopping.wait(0.5)
    return 0


def shut_down(host: Host, stopping: threading.Event) -> None:
    """Let the requests in flight finish (on a requested stop), stop every tritonserver, and say how it went."""
    if all(s.watchdog is None for s in host.servers):  # it never started (or is stopped already)
        host.stop()
        return
    t0 = time.monotonic()
    grace = None
    if stopping.is_set() and any(s.running for s in host.servers):
        exit_timeout = host.options.exit_timeout_s
        drained = host.drain(exit_timeout)
        waited = time.monotonic() - t0
        log.info("requests in flight %s after %.1f s", "finished" if drained else "still running", waited)
        grace = max(0.0, exit_timeout - waited) + STOP_MARGIN_S  # the whole stop: the exit timeout + the margin
    code = host.stop(timeout_s=grace)
    done = []
    for part, cleanup in zip(host.parts, host.cleanups):
        where = f"GPU {part.gpu}: " if host.shared else ""
        if cleanup is None:
            done.append(f"{where}the watchdog did not report its clean-up")
        elif cleanup.nothing_killed:
            done.append(f"{where}nothing left to kill")
        else:
            done.append(f"{where}the watchdog killed {list(cleanup.killed) or 'no process'}, MPS daemon {cleanup.mps}")
    if host.shared and all(c is not None and c.nothing_killed for c in host.cleanups):
        done = ["nothing left to kill"]
    log.info("tritonserver stopped (exit code %s) after %.1f s; %s", code, time.monotonic() - t0, "; ".join(done))


def serve(args: argparse.Namespace, stopping: threading.Event | None = None) -> int:
    """Run the host's servers in the foreground until ``stopping`` is set (SIGINT/SIGTERM); return an exit code.

    A requested stop, at any moment (start-up included), exits 0 once every tritonserver has stopped: the
    requests in flight get Triton's exit timeout first. While they run, a
    :class:`~tritonprep.launcher.supervise.Supervisor` per server restarts it when a model stops serving (unless
    ``--no-supervise``); with one server per GPU, a GPU whose server keeps failing is given up while the others
    serve on. What cannot start (options, :mod:`.preflight`'s checks) raises
    :class:`~tritonprep.errors.StartRefused` before any process does.
    """
    stopping = stopping or threading.Event()
    if stopping.is_set():
        return 0
    try:
        host = Host(options_from_args(args), args.log_file)
    except ServerError as e:  # options that cannot be served: nothing has started
        raise StartRefused(str(e)) from None
    preflight.check(host)  # a StartRefused before anything starts
    try:
        host.start()
        try:
            host.wait_ready(args.ready_timeout, cancel=stopping)
        except ServerError:
            if stopping.is_set():
                return 0  # stopped while starting: a requested stop
            raise
        log_ready(host, args)
        if not args.no_supervise:
            host.supervise(max_restarts=args.max_restarts, ready_timeout_s=args.ready_timeout)
        return run_until_stopped(host, not args.no_supervise, stopping)
    finally:
        host.unsupervise()
        shut_down(host, stopping)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``tritonprep serve`` and ``python -m tritonprep.launcher [serve]``."""
    stopping = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        log.info("received %s, stopping tritonserver", signal.Signals(signum).name)
        stopping.set()

    for sig in (signal.SIGINT, signal.SIGTERM):  # first: a stop at any moment is a clean one
        signal.signal(sig, on_signal)
    logs.setup("tritonprep")
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        return serve(args, stopping)
    except StartRefused as e:
        log.error("%s", e)
        return 2
    except ServerError as e:
        log.error("%s", e)
        return 1
