"""The checks of ``make test-compose`` against the compose stack that tests/compose/run.sh started.

Each check talks to the container's server over real HTTP and gRPC from this machine, as a user
would, with the project's CLI (``tritonprep classify`` / ``embed``) and tritonclient; the reference
answers come from the embedded server (``tritonprep.launcher``) on the same photos and the same
model files. Prints one line per check and closes with ``N passed, N failed``; exit 1 if any failed.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import socket
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from scripts.demo import write_photos  # noqa: E402  (the demo's photos: scikit-image's samples)

log = logging.getLogger("test-compose")
CLI = Path(sys.executable).with_name("tritonprep")
ADMIN_HEADER = "triton-admin-key"
#: scores of the same network on the same input in another process (thread counts may differ)
SCORE_TOLERANCE = 1e-4


def http_status(url: str, headers: dict[str, str] | None = None, data: bytes | None = None) -> int:
    request = urllib.request.Request(url, data=data, headers=headers or {}, method="POST" if data else "GET")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as e:
        return e.code


def cli(*args: str) -> list[dict]:
    """Run the tritonprep CLI with --json; its records, one per image."""
    out = subprocess.run([str(CLI), *args, "--json"], capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, f"tritonprep {' '.join(args)} exited {out.returncode}: {out.stderr[-2000:]}"
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]


def by_file(records: list[dict]) -> dict[str, dict]:
    return {Path(r["file"]).name: r for r in records}


def same_predictions(got: list[dict], want: list[dict], what: str) -> None:
    g, w = by_file(got), by_file(want)
    assert set(g) == set(w), f"{what}: images {sorted(g)} != {sorted(w)}"
    for name in w:
        gp, wp = g[name]["predictions"], w[name]["predictions"]
        assert [p["index"] for p in gp] == [p["index"] for p in wp], f"{what} {name}: {gp} != {wp}"
        for a, b in zip(gp, wp):
            close = abs(a["score"] - b["score"]) <= SCORE_TOLERANCE
            assert a["label"] == b["label"] and close, f"{what} {name}: {a}, {b}"


def cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


class Stack:
    """The running container's endpoints and the answers collected from it."""

    def __init__(self, args: argparse.Namespace, photos: Path) -> None:
        self.args = args
        self.photos = photos
        self.http = f"http://127.0.0.1:{args.http_port}"
        self.grpc = f"127.0.0.1:{args.grpc_port}"
        self.answers: dict[str, list[dict]] = {}

    def docker(self, *argv: str) -> str:
        out = subprocess.run(["docker", *argv], capture_output=True, text=True, timeout=60, check=False)
        assert out.returncode == 0, f"docker {' '.join(argv)}: {out.stderr.strip()}"
        return out.stdout.strip()

    # ------------------------------------------------------------------ checks
    def restricted_apis_need_the_admin_key(self) -> None:
        key = {ADMIN_HEADER: self.args.admin_key}
        stats = f"{self.http}/v2/models/stats"
        assert http_status(stats) == 403, "statistics answered without the admin key"
        assert http_status(stats, {ADMIN_HEADER: "wrong"}) == 403, "statistics answered a wrong key"
        assert http_status(stats, key) == 200, "statistics refused the admin key"
        index = f"{self.http}/v2/repository/index"
        assert http_status(index, data=b"{}") == 403, "the repository API answered without the admin key"
        assert http_status(index, key, data=b"{}") == 200, "the repository API refused the admin key"
        assert http_status(f"{self.http}/v2/models/classify/config") == 403, "model config without the key"

        import tritonclient.grpc as grpcclient
        from tritonclient.utils import InferenceServerException

        client = grpcclient.InferenceServerClient(self.grpc)
        try:
            try:
                client.get_inference_statistics("classify")
            except InferenceServerException as e:
                assert "permission" in str(e).lower() or "admin" in str(e).lower(), e
            else:
                raise AssertionError("gRPC statistics answered without the admin key")
            header = {f"triton-grpc-protocol-{ADMIN_HEADER}": self.args.admin_key}
            client.get_inference_statistics("classify", headers=header)
        finally:
            client.close()

    def open_apis_and_metrics_answer(self) -> None:
        assert http_status(f"{self.http}/v2/health/live") == 200
        assert http_status(f"{self.http}/v2") == 200
        with urllib.request.urlopen(f"http://127.0.0.1:{self.args.metrics_port}/metrics", timeout=30) as r:
            text = r.read().decode()
        # the series the Kubernetes autoscaler's metric is made of (docker/k8s/tritonprep.yaml's adapter rule)
        for series in ("nv_inference_request_success", "nv_inference_queue_duration_us"):
            assert f'{series}{{model="classify"' in text, f"no {series} for classify on the metrics port"

    def every_model_of_the_repository_is_ready(self) -> None:
        models = sorted(p.parent.name for p in (ROOT / "model_repository").glob("*/config.pbtxt"))
        assert {"classify", "classify_fused", "embed", "analyze"} <= set(models), models
        not_ready = [m for m in models if http_status(f"{self.http}/v2/models/{m}/ready") != 200]
        assert not not_ready, f"not ready in the container: {not_ready}"

    def the_server_runs_unprivileged(self) -> None:
        c = self.args.container
        assert self.docker("exec", c, "id", "-u") == "1000", "the server does not run as uid 1000"
        status = self.docker("exec", c, "cat", "/proc/1/status")
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        for cap in ("CapPrm", "CapEff", "CapBnd"):
            assert int(fields[cap].strip(), 16) == 0, f"{cap} {fields[cap].strip()}: the server has capabilities"
        assert fields["NoNewPrivs"].strip() == "1", "no-new-privileges is not set"
        assert self.docker("inspect", c, "--format", "{{.HostConfig.ReadonlyRootfs}}") == "true"

    def classify_over_grpc_and_http(self) -> None:
        photos = str(self.photos)
        self.answers["grpc"] = cli("classify", photos, "--url", f"grpc://{self.grpc}")
        self.answers["http"] = cli("classify", photos, "--url", self.http)
        assert len(self.answers["grpc"]) == 4, self.answers["grpc"]
        same_predictions(self.answers["http"], self.answers["grpc"], "HTTP against gRPC")
        fused = cli("classify", photos, "--url", f"grpc://{self.grpc}", "--model", "classify_fused", "--top-k", "1")
        for name, record in by_file(fused).items():
            want = by_file(self.answers["grpc"])[name]["predictions"][0]
            assert record["predictions"][0]["index"] == want["index"], f"classify_fused {name}: {record}, {want}"
        self.answers["embed"] = cli("embed", str(self.photos / "chelsea.jpg"), "--url", f"grpc://{self.grpc}")
        (vector,) = [r["embedding"] for r in self.answers["embed"]]
        assert len(vector) == 1280 and abs(math.sqrt(sum(v * v for v in vector)) - 1) < 1e-3

    def answers_equal_the_embedded_servers(self) -> None:
        assert "grpc" in self.answers, "nothing to compare: classify failed"
        from tritonprep.launcher.options import ServerOptions
        from tritonprep.launcher.process import EmbeddedServer

        http_port, grpc_port, metrics_port = free_ports(3)
        options = ServerOptions(
            ROOT / "model_repository", http_port=http_port, grpc_port=grpc_port, metrics_port=metrics_port
        )
        with tempfile.TemporaryDirectory() as tmp, EmbeddedServer(options, Path(tmp) / "tritonserver.log"):
            url = f"grpc://{options.grpc_url}"
            reference = cli("classify", str(self.photos), "--url", url)
            embedding = cli("embed", str(self.photos / "chelsea.jpg"), "--url", url)
        same_predictions(self.answers["grpc"], reference, "the container against the embedded server")
        c = cosine(self.answers["embed"][0]["embedding"], embedding[0]["embedding"])
        assert c >= 0.9999, f"embedding: cosine {c} between the container and the embedded server"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--container", required=True, help="the server's container id")
    parser.add_argument("--admin-key", required=True)
    parser.add_argument("--http-port", type=int, required=True)
    parser.add_argument("--grpc-port", type=int, required=True)
    parser.add_argument("--metrics-port", type=int, required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="test-compose: %(message)s", stream=sys.stdout)
    with tempfile.TemporaryDirectory(prefix="tritonprep-compose-") as tmp:
        photos = Path(tmp)
        write_photos(photos)
        stack = Stack(args, photos)
        checks: list[Callable[[], None]] = [
            stack.restricted_apis_need_the_admin_key,
            stack.open_apis_and_metrics_answer,
            stack.every_model_of_the_repository_is_ready,
            stack.the_server_runs_unprivileged,
            stack.classify_over_grpc_and_http,
            stack.answers_equal_the_embedded_servers,
        ]
        passed = failed = 0
        for check in checks:
            name = check.__name__.replace("_", " ")
            try:
                check()
            except AssertionError as e:
                failed += 1
                log.error("FAILED %s: %s", name, e)
            else:
                passed += 1
                log.info("ok     %s", name)
    log.info("%d passed, %d failed", passed, failed)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
