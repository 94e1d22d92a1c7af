"""The load generator of the fault, overload and soak scenarios.

Images from the hostile-input corpus, a gRPC request that returns a classified outcome
instead of raising, client threads, the resident memory of the server and each of its stubs
from /proc, and the figures' report. Traffic goes to 127.0.0.1 only, and every loop is
bounded in count and time.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tritonprep.launcher.process import EmbeddedServer
from tritonprep.launcher.supervise import stub_processes
from tritonprep_client import image_input

from .servers import rss_bytes

if TYPE_CHECKING:
    from tritonprep.launcher.host import Host

log = logging.getLogger("loadgen")


def images() -> dict[str, list[bytes]]:
    """Good images (real photos in every format) and bad ones (each rejected by a limit or the decoder)."""
    from .corpus import build

    items = build()
    good = [
        it.data
        for it in items
        if it.expect == "ok" and len(it.data) < 2_000_000 and it.group in ("valid", "orientation", "exif-broken")
    ]
    bad = [it.data for it in items if it.expect == "error" and len(it.data) < 2_000_000]
    return {"good": good, "bad": bad}


# ---------------------------------------------------------------------- requests
@dataclass(frozen=True)
class Outcome:
    """What one request got."""

    kind: str  # what was sent (caller's label)
    start: float  # time.monotonic()
    end: float
    category: str  # see categorize()
    message: str = ""
    #: the id of the server its connection reached (``tritonprep-gpu1`` on a multi-GPU host; "" if unknown)
    server: str = ""

    @property
    def latency(self) -> float:
        """Seconds from send to answer."""
        return self.end - self.start


def categorize(status: str, message: str) -> str:
    """A short name for a Triton/gRPC error (the categories the scripts count)."""
    m = message.lower()
    if "deadline" in m or "DEADLINE_EXCEEDED" in status:
        return "client-deadline"
    if "exceeds maximum queue size" in m:
        return "queue-full"
    if "timeout expired" in m:
        return "queue-timeout"
    if "stub process" in m and "not healthy" in m:
        return "stub-dead"
    if "out of service" in m:
        return "instance-failed"
    if (
        "INVALID_ARG" in status
        or "image" in m
        and (
            "cannot" in m
            or "limit" in m
            or "corrupt" in m
            or "truncated" in m
            or "signature" in m
            or "not allowed" in m
            or "empty" in m
            or "header" in m
        )
    ):
        return "rejected-input"
    if "UNAVAILABLE" in status or "connect" in m or "socket closed" in m or "not ready" in m or "unknown model" in m:
        return "server-unavailable"
    return "other"


class GrpcSender:
    """One gRPC client on a TCP connection of its own that turns every call into an :class:`Outcome`.

    Each sender's channel has its own connection (gRPC Python otherwise shares one between channels of the
    same target and settings), so on a multi-GPU host, whose servers share the port, the kernel gives each
    sender one of them. With ``track`` each outcome names the server its connection reached (``GET /v2``'s
    name, asked before each request: a reset or aged connection reconnects, maybe to another server).
    """

    def __init__(self, url: str, track: bool = False) -> None:
        import tritonclient.grpc as grpcclient

        self.m = grpcclient
        # reconnect quickly after a server restart (gRPC's default backoff grows to 2 minutes), keep
        # tritonclient's unlimited message sizes (passing channel_args replaces them), one connection per sender
        args = [
            ("grpc.max_send_message_length", 2**31 - 1),
            ("grpc.max_receive_message_length", 2**31 - 1),
            ("grpc.initial_reconnect_backoff_ms", 200),
            ("grpc.min_reconnect_backoff_ms", 200),
            ("grpc.max_reconnect_backoff_ms", 500),
            ("grpc.use_local_subchannel_pool", 1),
        ]
        self.client = grpcclient.InferenceServerClient(url, channel_args=args)
        self.track = track
        self._server = ""

    def server(self, timeout_s: float = 2.0) -> str:
        """The id of the server this sender's connection reaches ("" if it does not answer)."""
        from tritonclient.utils import InferenceServerException

        if not self._server:
            try:
                self._server = str(self.client.get_server_metadata(client_timeout=timeout_s).name)
            except InferenceServerException:
                return ""
        return self._server

    def send(self, model: str, batch: list[bytes], kind: str, timeout_s: float) -> Outcome:
        """Send ``batch`` as one request to ``model``; never raises for a server-side failure. With ``track`` the
        server is asked for before each request: a connection that aged out reconnects, maybe to another."""
        from tritonclient.utils import InferenceServerException

        inp = image_input(batch, self.m)
        if self.track:
            self._server = ""
        server = self.server() if self.track else ""
        start = time.monotonic()
        try:
            self.client.infer(model, [inp], client_timeout=timeout_s)
        except InferenceServerException as e:
            self._server = ""
            status, message = str(e.status() or ""), str(e.message() or e)
            category = categorize(status, message)
            return Outcome(kind, start, time.monotonic(), category, f"{status} {message}"[:300], server)
        return Outcome(kind, start, time.monotonic(), "ok", server=server)

    def close(self) -> None:
        """Close the channel."""
        self.client.close()


def connect_to(url: str, server_id: str | None, tries: int = 200) -> GrpcSender:
    """A sender whose connection reached the server ``server_id`` of the servers sharing ``url``'s port (any
    sender for None); a RuntimeError after ``tries`` connections that reached others."""
    for _ in range(tries):
        sender = GrpcSender(url, track=True)
        if server_id is None or sender.server() == server_id:
            return sender
        sender.close()
    raise RuntimeError(f"no connection to {url} reached {server_id} in {tries} tries")


def run_threads(n: int, target: object, *args: object) -> list[threading.Thread]:
    """Start ``n`` daemon threads running ``target(i, *args)``."""
    threads = [threading.Thread(target=target, args=(i, *args), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    return threads


# ---------------------------------------------------------------------- figures
def memory(server: EmbeddedServer | Host) -> dict[str, int]:
    """Resident memory (bytes) of tritonserver and of each stub, by model, from /proc; of a host (anything with
    ``servers``, as :class:`tritonprep.launcher.host.Host`: a tritonserver per GPU), summed over its servers."""
    out: dict[str, int] = {}
    for one in getattr(server, "servers", None) or [server]:
        if one.pid is None:
            continue
        out["tritonserver"] = out.get("tritonserver", 0) + (rss_bytes(one.pid) or 0)
        for stub in stub_processes(one.pid):
            out[f"stub:{stub.model}"] = out.get(f"stub:{stub.model}", 0) + (rss_bytes(stub.pid) or 0)
    return out


def percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile (0..100) of ``values`` (nan when empty)."""
    return float(np.percentile(values, q)) if values else float("nan")


def report(figures: dict[str, Any], json_path: Path | None = None) -> None:
    """Print the figures one per line (a list of dicts, such as rounds, as ``<key> <n> <field>``)
    and, with ``json_path``, also write them there as JSON."""
    lines: list[tuple[str, Any]] = []
    for key, value in figures.items():
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            lines += [(f"{key.rstrip('s')} {i} {k}", v) for i, part in enumerate(value, 1) for k, v in part.items()]
        else:
            lines.append((key, value))
    width = max((len(k) for k, _ in lines), default=0) + 2
    for key, value in lines:
        sys.stdout.write(f"{key:{width}s} {value}\n")
    if json_path is not None:
        json_path.write_text(json.dumps(figures, indent=2))


def scenario_settings(
    add_arguments: Callable[[argparse.ArgumentParser], argparse.ArgumentParser],
    argv: list[str],
    overrides: dict[str, object],
) -> argparse.Namespace:
    """A scenario's command-line defaults (``argv`` parsed by ``add_arguments``) with ``overrides`` (for tests).

    An override the command line does not have is a TypeError, so a test cannot set a setting that is ignored.
    """
    args = add_arguments(argparse.ArgumentParser()).parse_args(argv)
    for key, value in overrides.items():
        if not hasattr(args, key):
            raise TypeError(f"unknown setting {key!r}")
        setattr(args, key, value)
    return args
