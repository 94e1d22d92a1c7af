"""Real tritonserver processes for tests and scripts: paths of the checkout, free ports, a scoped server,
and the resident memory of a process."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tritonprep.launcher.host import Host
from tritonprep.launcher.options import ServerOptions
from tritonprep.launcher.process import EmbeddedServer
from tritonprep.launcher.supervise import Supervisor

REPO = Path(__file__).resolve().parents[2]
MODEL_REPOSITORY = REPO / "model_repository"
ONNX = MODEL_REPOSITORY / "classifier" / "1" / "model.onnx"
EMBEDDER_ONNX = MODEL_REPOSITORY / "embedder" / "1" / "model.onnx"
#: the `tritonprep` command of this environment
CLI = Path(sys.executable).with_name("tritonprep")


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """``n`` distinct free TCP ports on ``host`` (for servers started by tests and benchmarks)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind((host, 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def rss_bytes(pid: int) -> int | None:
    """Resident set size of a process (VmRSS), or None if it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


@dataclass(frozen=True)
class ServeCommand:
    """A `tritonprep serve` command line on three free localhost ports."""

    argv: list[str]
    http: int
    grpc: int
    metrics: int


def serve_command(log_file: Path | str, *extra: str, repository: Path | None = None) -> ServeCommand:
    """`tritonprep serve` logging to ``log_file`` (on ``repository``, by default the CLI's own), then ``extra``."""
    http, grpc, metrics = free_ports(3)
    argv = [str(CLI), "serve"] + (["--model-repository", str(repository)] if repository is not None else [])
    argv += ["--http-port", str(http), "--grpc-port", str(grpc), "--metrics-port", str(metrics)]
    return ServeCommand([*argv, "--log-file", str(log_file), *extra], http, grpc, metrics)


#: GPU metrics ports that local_options() reserves: enough for a host of up to this many GPUs
MAX_GPUS = 8


@dataclass(frozen=True)
class ServeRun:
    """What a `tritonprep serve` run printed until it stopped, its exit code, and how long its stop took."""

    text: str
    code: int
    stop_s: float


def serve_until_ready_then_stop(argv: list[str], ready_timeout_s: float = 180, stop_timeout_s: float = 60) -> ServeRun:
    """Run `tritonprep serve` (``argv``), read its log until it says it is ready (its ``try: `` hint) or ends, send
    SIGTERM, and wait for its exit; killed on the way out whatever happens."""
    proc = subprocess.Popen(argv, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    lines: list[str] = []
    try:
        deadline = time.monotonic() + ready_timeout_s
        while time.monotonic() < deadline:
            line = proc.stderr.readline()  # type: ignore[union-attr]
            lines.append(line)
            if "try: " in line or (not line and proc.poll() is not None):
                break
        start = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=stop_timeout_s)
        stop_s = time.monotonic() - start
    finally:
        if proc.poll() is None:
            proc.kill()
    return ServeRun("".join(lines) + proc.stderr.read(), code, stop_s)  # type: ignore[union-attr]


def local_options(repository: Path = MODEL_REPOSITORY, **kw: object) -> ServerOptions:
    """Server options on free localhost ports: HTTP, gRPC, metrics, and each GPU's metrics for a multi-GPU host."""
    http, grpc, metrics, *gpu_metrics = free_ports(3 + MAX_GPUS)
    kw.setdefault("gpu_metrics_ports", tuple(gpu_metrics))
    return ServerOptions(repository, http_port=http, grpc_port=grpc, metrics_port=metrics, **kw)  # type: ignore[arg-type]


@contextmanager
def running_host(
    log_path: Path,
    *,
    supervise: bool = False,
    env: dict[str, str] | None = None,
    repository: Path = MODEL_REPOSITORY,
    supervisor_kw: dict[str, Any] | None = None,
    **option_kw: object,
) -> Iterator[Host]:
    """A ready host (one tritonserver per GPU of this machine, or one on the CPU; with
    ``TRITONPREP_FAKE_GPUS`` set, that many CPU servers) on free ports, stopped on exit, whatever happens.
    ``env``: for tritonserver and its stubs; ``option_kw``: ServerOptions fields; ``supervise``: each server
    gets its supervisor (the host's supervise(), with ``supervisor_kw``)."""
    host = Host(local_options(repository, env=tuple((env or {}).items()), **option_kw), log_path)
    with host:
        if supervise:
            host.supervise(**(supervisor_kw or {}))
        yield host


@contextmanager
def running_server(
    log_path: Path,
    *,
    supervise: bool = False,
    env: dict[str, str] | None = None,
    repository: Path = MODEL_REPOSITORY,
    exit_timeout_s: int = 30,
    model_config_name: str | None = None,
    mps: str = "auto",
    gpu_memory_budget: str = "auto",
    gpus: tuple[int, ...] | None = None,
    **supervisor_kw: object,
) -> Iterator[tuple[EmbeddedServer, Supervisor | None]]:
    """A ready embedded server on free ports (and its supervisor), stopped on exit, whatever happens. ``gpus``: the
    GPUs it serves on (None: every GPU here; ``()``: none, the CPU server even on a GPU host)."""
    options = local_options(
        repository,
        env=tuple((env or {}).items()),
        exit_timeout_s=exit_timeout_s,
        model_config_name=model_config_name,
        mps=mps,
        gpu_memory_budget=gpu_memory_budget,
        gpus=gpus,
    )
    server = EmbeddedServer(options, log_path)
    supervisor = None
    with server:
        if supervise:
            supervisor = Supervisor(server, **supervisor_kw)  # type: ignore[arg-type]
            supervisor.start()
        try:
            yield server, supervisor
        finally:
            if supervisor is not None:
                supervisor.stop()
