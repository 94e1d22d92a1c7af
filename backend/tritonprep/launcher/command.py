"""The tritonserver command line of an embedded server: its flags, and the config name it picks.

Where no GPU is visible, the flags leave out what only a GPU uses, so that a healthy start on a CPU
machine logs no warning or error of tritonserver's own: no pinned-memory pool (allocating it asks the
CUDA driver, which is not there), no CUDA memory pools, and no GPU metrics (DCGM). Two more CUDA
probes of Triton 2.51 run whatever the flags (the block manager's driver check at start-up and one CUDA
stream per ensemble, ``core/src/server.cc`` and ``ensemble_scheduler.cc``); :mod:`.logfilter` handles
their lines.

Every model of the repository loads at once (``--model-load-thread-count``: Triton's default of 4 threads
made the fifth model wait for one of the first four; measured on the H100, ``preprocess`` began 2 s late).

A server that shares its ports with the other GPUs' servers of a host (:mod:`.host`) gets Triton's reuse-port
flags, its ``--id``, and a gRPC connection age (:data:`MAX_CONNECTION_AGE_MS`), so that long-lived client
connections spread again over the servers after one of them restarted.

Triton's metrics thread sleeps half of ``--metrics-interval-ms`` between polls and tritonserver joins it
as it exits (``core/src/metrics.cc``): with the default 2000 ms an exit waited up to 1 s for it, so the
launcher asks for :data:`METRICS_INTERVAL_MS` (CPU, pinned-memory and GPU gauges refresh that often;
request counters are immediate either way).
"""

from __future__ import annotations

from pathlib import Path

from .options import ServerOptions
from .served import config_in_use

#: the configuration name the launcher selects where it sees a GPU (``<model>/configs/gpu.pbtxt``)
GPU_CONFIG_NAME = "gpu"
#: Triton's own default of ``--model-load-thread-count``: the fewest threads the launcher asks for
MIN_LOAD_THREADS = 4
#: with shared ports: the longest a gRPC connection lives (then the client reconnects, reaching any GPU's server),
#: and the time its calls in flight get to finish then
MAX_CONNECTION_AGE_MS, CONNECTION_AGE_GRACE_MS = 30_000, 30_000
#: ``--metrics-interval-ms``: tritonserver's exit waits up to half of it for the metrics thread (default 2000)
METRICS_INTERVAL_MS = 500


def load_threads(repository: Path, config_name: str | None = None) -> int:
    """One model-loading thread per model Triton serves from ``repository`` (with ``config_name``), at least 4."""
    try:
        models = sum(1 for p in repository.iterdir() if p.is_dir() and config_in_use(p, config_name) is not None)
    except OSError:
        models = 0
    return max(MIN_LOAD_THREADS, models)


def config_name(options: ServerOptions, gpus: int) -> str | None:
    """The ``--model-config-name`` for ``gpus`` visible GPUs (None: each model's config.pbtxt)."""
    name = options.model_config_name
    if name is None and gpus:
        name = GPU_CONFIG_NAME  # models with configs/gpu.pbtxt take their GPU configuration
    return name or None


def tritonserver_args(
    options: ServerOptions, backend_dir: Path, repository: Path, admin_key: str, gpus: int
) -> list[str]:
    """The arguments of tritonserver serving ``repository`` on ``gpus`` GPUs (numbered 0..gpus-1)."""
    o = options
    cmd = [
        "--model-repository",
        str(repository),
        "--backend-directory",
        str(backend_dir),
        "--http-address",
        o.host,
        "--http-port",
        str(o.http_port),
        "--grpc-address",
        o.host,
        "--grpc-port",
        str(o.grpc_port),
        "--metrics-address",
        o.host,
        "--metrics-port",
        str(o.metrics_port),
        "--metrics-interval-ms",
        str(METRICS_INTERVAL_MS),
        "--model-control-mode",
        "none",
        "--model-load-thread-count",
        str(load_threads(repository, config_name(o, gpus))),
        "--strict-readiness",
        "true",
        "--exit-timeout-secs",
        str(o.exit_timeout_s),
        "--log-verbose",
        str(o.log_verbose),
        "--pinned-memory-pool-byte-size",
        str(o.pinned_memory_pool_mb << 20 if gpus else 0),
        "--backend-config",
        "python,shm-default-byte-size=16777216",
        "--backend-config",
        "python,shm-growth-byte-size=67108864",
    ]
    for gpu in range(gpus):
        cmd += ["--cuda-memory-pool-byte-size", f"{gpu}:{o.cuda_memory_pool_mb << 20}"]
    if not gpus:
        cmd += ["--allow-gpu-metrics", "false"]
    name = config_name(o, gpus)
    if name:
        cmd += ["--model-config-name", name]
    if o.reuse_ports:  # the host's other servers listen on the same ports; the kernel spreads the connections
        cmd += ["--reuse-http-port", "true", "--reuse-grpc-port", "true"]
        # a gRPC connection lives at most this long (its calls finish in the grace): clients reconnect, so the
        # load spreads again over every GPU's server after one of them restarted
        cmd += ["--grpc-max-connection-age", str(MAX_CONNECTION_AGE_MS), "--grpc-max-connection-age-grace",
                str(CONNECTION_AGE_GRACE_MS)]  # fmt: skip
    if o.server_id:
        cmd += ["--id", o.server_id]
    if o.restricted_apis:
        restriction = f"{','.join(o.restricted_apis)}:{o.admin_header}={admin_key}"
        cmd += [f"--http-restricted-api={restriction}", f"--grpc-restricted-protocol={restriction}"]
    if o.grpc_tls_cert is not None and o.grpc_tls_key is not None:
        cmd += ["--grpc-server-cert", str(o.grpc_tls_cert), "--grpc-server-key", str(o.grpc_tls_key)]
        if o.grpc_tls_root_cert is not None:
            cmd += ["--grpc-use-ssl-mutual", "true", "--grpc-root-cert", str(o.grpc_tls_root_cert)]
        else:
            cmd += ["--grpc-use-ssl", "true"]
    return cmd + list(o.extra_args)
