"""``tritonprep serve``: the embedded server in the foreground, supervised, until SIGINT or SIGTERM."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from ..errors import ServerError
from .options import ADMIN_HEADER, ADMIN_KEY_ENV, DEFAULT_REPOSITORY, RESTRICTED_APIS, ServerOptions
from .process import EmbeddedServer
from .supervise import Supervisor

log = logging.getLogger(__name__)


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
    p = parser or argparse.ArgumentParser(prog="tritonprep serve", description="Run the embedded Triton server.")
    p.add_argument("--model-repository", type=Path, default=DEFAULT_REPOSITORY, help="default: %(default)s")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: %(default)s; 0.0.0.0 exposes it)")
    p.add_argument("--http-port", type=int, default=8000)
    p.add_argument("--grpc-port", type=int, default=8001)
    p.add_argument("--metrics-port", type=int, default=8002)
    p.add_argument(
        "--model-config-name",
        help="use <model>/configs/<NAME>.pbtxt where present (default: gpu where a GPU is visible, which gives "
        "preprocess its GPU instances and batching; else each model's config.pbtxt)",
    )
    p.add_argument("--cuda-memory-pool-mb", type=int, default=512, help="per GPU (default: %(default)s)")
    p.add_argument(
        "--gpus",
        type=gpu_list,
        help="comma-separated GPU indices to serve on, e.g. 0,2 (default: every GPU this process sees, after "
        "CUDA_VISIBLE_DEVICES); each GPU model gets its instance count on each",
    )
    p.add_argument("--log-verbose", type=int, default=0)
    p.add_argument("--log-file", type=Path, help="write Triton's log here instead of the terminal")
    p.add_argument("--ready-timeout", type=float, default=600.0, help="seconds to wait for the models")
    p.add_argument("--exit-timeout", type=int, default=30, help="seconds in-flight requests get on shutdown")
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
    p.add_argument("triton_args", nargs=argparse.REMAINDER, help="after --: extra tritonserver arguments")
    return p


def options_from_args(args: argparse.Namespace) -> ServerOptions:
    """Turn parsed arguments into :class:`ServerOptions`."""
    extra = [a for a in args.triton_args if a != "--"]
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
        gpus=args.gpus,
        exit_timeout_s=args.exit_timeout,
        extra_args=tuple(extra),
        restricted_apis=() if args.unrestricted else RESTRICTED_APIS,
        admin_key=admin_key,
        grpc_tls_cert=args.grpc_tls_cert,
        grpc_tls_key=args.grpc_tls_key,
        grpc_tls_root_cert=args.grpc_tls_root_cert,
    )


def serve(args: argparse.Namespace) -> int:
    """Run the server in the foreground until SIGINT/SIGTERM; return an exit code.

    On SIGINT/SIGTERM tritonserver gets Triton's exit timeout to finish the requests in
    flight. While it runs, a :class:`~tritonprep.launcher.supervise.Supervisor` restarts it when a
    model stops serving (unless ``--no-supervise``).
    """
    options = options_from_args(args)
    server = EmbeddedServer(options, args.log_file)
    stopping = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        log.info("received %s, stopping tritonserver", signal.Signals(signum).name)
        stopping.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, on_signal)
    server.start()
    supervisor = None
    try:
        try:
            server.wait_ready(args.ready_timeout, cancel=stopping)
        except ServerError:
            if stopping.is_set():
                return 130
            raise
        states = server.model_states()
        log.info(
            "tritonserver ready: HTTP %s  gRPC %s%s  metrics http://%s:%d/metrics",
            options.http_url,
            options.grpc_url,
            " (TLS)" if options.grpc_tls_cert else "",
            options.host,
            options.metrics_port,
        )
        log.info("models ready: %s", ", ".join(n for n, ok in states.items() if ok) or "none")
        if options.restricted_apis:
            source = (
                ("--admin-key-file" if args.admin_key_file else f"${ADMIN_KEY_ENV}")
                if options.admin_key
                else "a random value (set --admin-key-file or $" + ADMIN_KEY_ENV + " to use them)"
            )
            log.info(
                "restricted APIs (%s) need the header %s: %s",
                ",".join(options.restricted_apis),
                options.admin_header,
                source,
            )
        log.info("try: .venv/bin/tritonprep classify photo.jpg --url %s", options.grpc_url)
        if not args.no_supervise:
            supervisor = Supervisor(server, max_restarts=args.max_restarts, ready_timeout_s=args.ready_timeout)
            supervisor.start()
        while not stopping.is_set():
            if supervisor is not None and supervisor.gave_up.is_set():
                log.error("tritonserver keeps failing; giving up")
                return 1
            if supervisor is None and not server.running:
                log.error("tritonserver exited unexpectedly with code %s", server.poll())
                return 1
            stopping.wait(0.5)
        return 0
    finally:
        if supervisor is not None:
            supervisor.stop()
        if stopping.is_set() and server.running:
            t0 = time.monotonic()
            drained = server.drain(options.exit_timeout_s)
            log.info(
                "requests in flight %s after %.1f s", "finished" if drained else "still running", time.monotonic() - t0
            )
        code = server.stop()
        log.info("tritonserver stopped (exit code %s)", code)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``tritonprep serve`` and ``python -m tritonprep.launcher``."""
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s tritonprep: %(message)s", datefmt="%H:%M:%S", force=True
    )
    args = build_parser().parse_args(argv)
    try:
        return serve(args)
    except ServerError as e:
        log.error("%s", e)
        return 1
