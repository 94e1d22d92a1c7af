"""Shared fixtures: real photos (scikit-image's samples, encoded here) and a real tritonserver.

The ``server`` fixture starts the embedded Triton server on this repository's
``model_repository/`` (free ports, localhost) once per session; tests talk to it over
real HTTP and gRPC. On failure its log's tail is printed. Helpers that scripts use too live
in the test kit (``tritonprep_testkit``).

Nothing a session starts may outlive it: ``nothing_outlives_the_suite`` fails the run if a
tritonserver, stub or watchdog that the suite started, or a shared-memory region of theirs, is
still there ``SESSION_BOUND_S`` after the last test.
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tritonprep_testkit import leftovers
from tritonprep_testkit.photos import encode, load_photos
from tritonprep_testkit.servers import EMBEDDER_ONNX, MODEL_REPOSITORY, ONNX, local_options

#: seconds that what a session started may take to go once its last test is done
SESSION_BOUND_S = float(os.environ.get("TRITONPREP_SESSION_BOUND_S", "20"))


@pytest.fixture(scope="session", autouse=True)
def nothing_outlives_the_suite() -> Iterator[None]:
    """Marks every process the session starts (an environment variable that tritonserver, its stubs and
    the watchdogs inherit), sweeps what dead servers of earlier runs left, and after the last test fails
    the run if anything of the session's servers is still there after ``SESSION_BOUND_S`` (and removes it)."""
    from tritonprep.launcher.reaper import sweep

    marker = f"{os.getpid()}-{secrets.token_hex(4)}"
    os.environ[leftovers.SESSION_ENV] = marker
    sweep()
    regions_before, folders_before = leftovers.region_names(), leftovers.work_dir_paths()
    yield
    deadline = time.monotonic() + SESSION_BOUND_S
    left = leftovers.of_session(marker, regions_before, folders_before)
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = leftovers.of_session(marker, regions_before, folders_before)
    if left:
        left.remove()
        pytest.fail(f"outlived the test suite by {SESSION_BOUND_S:.0f} s (now removed): {left}")


@pytest.fixture(scope="session")
def photos() -> dict[str, np.ndarray]:
    """Real photos as RGB arrays: a cat, an espresso, an astronaut, a rocket (scikit-image's
    samples, or the same photos as PNGs in $TRITONPREP_PHOTOS where scikit-image is absent)."""
    return load_photos()


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
    """The embedded host serving model_repository/ (started once per session): one tritonserver on a CPU or
    one-GPU machine, one per GPU on shared ports on a multi-GPU machine (tritonprep.launcher.host.Host)."""
    from tritonprep.launcher.host import Host

    for onnx in (ONNX, EMBEDDER_ONNX):
        if not onnx.is_file():
            pytest.fail(f"{onnx} is missing: run `make model` (make test does it for you)")
    log_path = tmp_path_factory.mktemp("triton") / "tritonserver.log"
    srv = Host(local_options(MODEL_REPOSITORY), log_path)
    with srv:
        yield srv
        if not srv.running:
            pytest.fail(f"tritonserver died during the tests{srv.log_tail()}")


@pytest.fixture(params=["grpc", "http"])
def client(request: pytest.FixtureRequest, server: object) -> Iterator[object]:
    """A ClassifyClient for each protocol."""
    from tritonprep_client import ClassifyClient

    opts = server.options  # type: ignore[attr-defined]
    url = opts.grpc_url if request.param == "grpc" else opts.http_url
    with ClassifyClient(url, request.param) as c:
        yield c
