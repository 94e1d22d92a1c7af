"""Small probes of a running server over localhost: free ports, the metrics text, requests in flight."""

from __future__ import annotations

import socket
import urllib.request


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


def fetch_metrics(host: str, port: int, timeout: float = 2.0) -> str:
    """Triton's Prometheus metrics text from ``host:port`` (the metrics endpoint is not a restricted API)."""
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=timeout) as r:  # noqa: S310 - localhost
        return r.read().decode()


#: the metrics whose sum is how many requests are queued (Triton) or inside a preprocess execute() (tritonprep)
IN_FLIGHT_METRICS = ("nv_inference_pending_request_count", "tritonprep_executing_requests")


def in_flight(metrics_text: str, model: str | None = None) -> float:
    """Requests queued or executing according to ``metrics_text`` (all models, or only ``model``)."""
    label = None if model is None else f'model="{model}"'
    total = 0.0
    for line in metrics_text.splitlines():
        if line.startswith(IN_FLIGHT_METRICS) and (label is None or label in line):
            total += float(line.rpartition(" ")[2])
    return total
