"""Shared fixtures: real photos (scikit-image's samples, encoded here) and a real tritonserver.

The ``server`` fixture starts the embedded Triton server on this repository's
``model_repository/`` (free ports, localhost) once per session; tests talk to it over
real HTTP and gRPC. On failure its log's tail is printed.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

REPO = Path(__file__).resolve().parent.parent
MODEL_REPOSITORY = REPO / "model_repository"
ONNX = MODEL_REPOSITORY / "classifier" / "1" / "model.onnx"


def encode(arr: np.ndarray, fmt: str = "JPEG", **kw: object) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format=fmt, **kw)
    return buf.getvalue()


@pytest.fixture(scope="session")
def photos() -> dict[str, np.ndarray]:
    """Real photos as RGB arrays: a cat, an espresso, an astronaut, a rocket (scikit-image's
    samples, or the same photos as PNGs in $TRITONPREP_PHOTOS where scikit-image is absent)."""
    from tests.corpus import full_photos

    return full_photos()


@pytest.fixture(scope="session")
def jpegs(photos: dict[str, np.ndarray]) -> dict[str, bytes]:
    """The photos as quality-90 JPEGs (different byte lengths and sizes)."""
    return {name: encode(arr, "JPEG", quality=90) for name, arr in photos.items()}


@pytest.fixture(scope="session")
def image_dir(tmp_path_factory: pytest.TempPathFactory, photos: dict[str, np.ndarray], jpegs: dict[str, bytes]) -> Path:
    """A folder with chelsea.jpg, coffee.png and rocket.jpg."""
    d = tmp_path_factory.mktemp("images")
    (d / "chelsea.jpg").write_bytes(jpegs["chelsea"])
    (d / "coffee.png").write_bytes(encode(photos["coffee"], "PNG"))
    (d / "rocket.jpg").write_bytes(jpegs["rocket"])
    return d


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """The embedded tritonserver serving model_repository/ (started once per session)."""
    from tritonprep.server import EmbeddedServer, ServerOptions, free_ports

    if not ONNX.is_file():
        pytest.fail(f"{ONNX} is missing: run `make model` (make test does it for you)")
    http, grpc, metrics = free_ports(3)
    log_path = tmp_path_factory.mktemp("triton") / "tritonserver.log"
    srv = EmbeddedServer(ServerOptions(MODEL_REPOSITORY, http_port=http, grpc_port=grpc, metrics_port=metrics), log_path)
    with srv:
        yield srv
        if srv.process is None or srv.process.poll() is not None:
            pytest.fail(f"tritonserver died during the tests{srv._log_tail()}")


@pytest.fixture(params=["grpc", "http"])
def client(request: pytest.FixtureRequest, server: object) -> Iterator[object]:
    """A ClassifyClient for each protocol."""
    from tritonprep_client import ClassifyClient

    opts = server.options  # type: ignore[attr-defined]
    url = opts.grpc_url if request.param == "grpc" else opts.http_url
    with ClassifyClient(url, request.param) as c:
        yield c
