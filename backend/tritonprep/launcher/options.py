"""How to run tritonserver: the options of an embedded server and the constants of its secure defaults."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ServerError
from .budget import parse_budget

_CHECKOUT = Path(__file__).resolve().parents[3]
#: the model repository of a checkout (an editable install: ``make setup``)
CHECKOUT_REPOSITORY = _CHECKOUT / "model_repository"
#: the model repository a wheel carries (setup.py packs it), read-only in site-packages: nothing writes into it
PACKAGED_REPOSITORY = Path(__file__).resolve().parents[1] / "model_repository"
#: what ``tritonprep serve`` serves without ``--model-repository``: the checkout's when run from one, else the
#: packaged one
DEFAULT_REPOSITORY = (
    CHECKOUT_REPOSITORY
    if (_CHECKOUT / "pyproject.toml").is_file() and CHECKOUT_REPOSITORY.is_dir()
    else PACKAGED_REPOSITORY
)
#: APIs that only clients with the admin header may use (Triton's --http-restricted-api names)
RESTRICTED_APIS = ("model-repository", "model-config", "shared-memory", "statistics", "trace", "logging")
ADMIN_HEADER = "triton-admin-key"
ADMIN_KEY_ENV = "TRITONPREP_ADMIN_KEY"
#: Triton checks a restricted gRPC protocol's header under this prefix
GRPC_HEADER_PREFIX = "triton-grpc-protocol-"
#: the choices of ServerOptions.mps (see tritonprep.launcher.mps)
MPS_MODES = ("auto", "on", "off")
#: the choices of ServerOptions.servers (see tritonprep.launcher.topology)
SERVER_LAYOUTS = ("per-gpu", "one")


@dataclass(frozen=True)
class ServerOptions:
    """How to run tritonserver. Defaults are the secure, local ones."""

    model_repository: Path = DEFAULT_REPOSITORY
    host: str = "127.0.0.1"
    http_port: int = 8000
    grpc_port: int = 8001
    metrics_port: int = 8002
    #: ``<model>/configs/<name>.pbtxt`` where present; None: "gpu" on a machine with a GPU, else config.pbtxt;
    #: "": every model's config.pbtxt, GPU or not
    model_config_name: str | None = None
    log_verbose: int = 0
    #: per-GPU CUDA memory pool: Python models' GPU outputs wait there between ensemble steps; the admission
    #: (tritonprep.launcher.admission) sizes the queues to it
    cuda_memory_pool_mb: int = 1536
    #: on GPUs: the longest a request waits in an ensemble's front queue before it is refused, in ms (0: the
    #: configs' timeouts); bounds the latency of what is admitted under overload (tritonprep.launcher.admission)
    queue_timeout_ms: int = 50
    #: the GPUs to serve on, by index among those this process sees; None: all of them (each GPU model gets
    #: its instance_group's count on every one)
    gpus: tuple[int, ...] | None = None
    pinned_memory_pool_mb: int = 256
    exit_timeout_s: int = 30
    extra_args: tuple[str, ...] = field(default_factory=tuple)
    #: extra environment variables of tritonserver and its stubs
    env: tuple[tuple[str, str], ...] = ()
    #: APIs that need the admin header; () leaves every API open
    restricted_apis: tuple[str, ...] = RESTRICTED_APIS
    admin_header: str = ADMIN_HEADER
    #: the admin header's value; None: a random one per EmbeddedServer (the APIs are then closed to others)
    admin_key: str | None = None
    #: gRPC over TLS: PEM server certificate and key; with a root certificate, mutual TLS
    grpc_tls_cert: Path | None = None
    grpc_tls_key: Path | None = None
    grpc_tls_root_cert: Path | None = None
    #: CUDA MPS for the instances: "auto" (where a GPU and nvidia-cuda-mps-control are), "on" (or fail), "off"
    mps: str = "auto"
    #: GPU memory each GPU may give the server: "auto" (its total less a margin), "off" (the configs as they
    #: are) or a size per GPU ("16G", "12000M", "16GiB"); see tritonprep.launcher.budget
    gpu_memory_budget: str = "auto"
    #: how the host maps onto tritonservers: "per-gpu" (one per GPU, on shared ports) or "one" (see .topology)
    servers: str = "per-gpu"
    #: the metrics ports of the per-GPU servers, one per GPU; None: metrics_port + 1, + 2, ... (metrics_port is
    #: then the host's own endpoint, :mod:`.front`)
    gpu_metrics_ports: tuple[int, ...] | None = None
    #: set by the host on each of its servers: share the HTTP and gRPC ports with the others (Triton's
    #: --reuse-http-port and --reuse-grpc-port), the server's --id, and the label of its log lines
    reuse_ports: bool = False
    server_id: str | None = None
    log_label: str | None = None

    def __post_init__(self) -> None:
        unknown = sorted(set(self.restricted_apis) - set(RESTRICTED_APIS) - {"health", "metadata", "inference"})
        if unknown:
            raise ServerError(
                f"unknown API(s) to restrict {unknown}; known: {', '.join(RESTRICTED_APIS)}, "
                "health, metadata, inference"
            )
        if (self.grpc_tls_cert is None) != (self.grpc_tls_key is None):
            raise ServerError("gRPC TLS needs both a certificate and a key (--grpc-tls-cert and --grpc-tls-key)")
        if self.grpc_tls_root_cert is not None and self.grpc_tls_cert is None:
            raise ServerError("mutual gRPC TLS (--grpc-tls-root-cert) needs --grpc-tls-cert and --grpc-tls-key")
        if self.mps not in MPS_MODES:
            raise ServerError(f"mps must be one of {', '.join(MPS_MODES)}, got {self.mps!r}")
        parse_budget(self.gpu_memory_budget)  # a ServerError naming the value if it is not one
        if self.queue_timeout_ms < 0:
            raise ServerError(
                f"queue_timeout_ms (--queue-timeout-ms) must be 0 (the configs' timeouts) or more, "
                f"got {self.queue_timeout_ms}"
            )
        if self.servers not in SERVER_LAYOUTS:
            raise ServerError(f"servers must be one of {', '.join(SERVER_LAYOUTS)}, got {self.servers!r}")
        for name in ("admin_header", "admin_key"):
            value = getattr(self, name)
            if value is not None and (not value or any(c in value for c in ",:= \t\r\n")):
                raise ServerError(f"{name} must be non-empty without spaces, ',', ':' or '=' (Triton's flag syntax)")

    @property
    def http_url(self) -> str:
        """Base URL of the HTTP endpoint."""
        return f"http://{self.host}:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        """host:port of the gRPC endpoint."""
        return f"{self.host}:{self.grpc_port}"
