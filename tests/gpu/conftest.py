"""GPU test fixtures: everything here is marked `gpu` and skips cleanly without CuPy or a GPU."""

from __future__ import annotations

import importlib.util

import pytest


def pytest_collection_modifyitems(items):
    for item in items:
        if "/tests/gpu/" in str(item.fspath):
            item.add_marker(pytest.mark.gpu)


@pytest.fixture(scope="session")
def cp():
    """The CuPy module (the library's import of it), with a usable GPU; skips otherwise."""
    from tritonprep.cuda import import_cupy
    from tritonprep.errors import RuntimeUnavailable

    try:
        cupy = import_cupy()
    except RuntimeUnavailable as e:
        pytest.skip(f"{e} (GPU tests need it)")
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            pytest.skip("no CUDA device")
    except cupy.cuda.runtime.CUDARuntimeError as e:
        pytest.skip(f"no usable CUDA device: {e}")
    return cupy


@pytest.fixture(scope="session")
def nvimgcodec(cp):
    """nvImageCodec (the library's import of it), or skip."""
    from tritonprep.decode.nvimgcodec import import_nvimgcodec
    from tritonprep.errors import RuntimeUnavailable

    try:
        return import_nvimgcodec()
    except RuntimeUnavailable as e:
        pytest.skip(str(e))


@pytest.fixture(scope="module")
def gpu_server(cp, nvimgcodec, request):
    """The session server, which must have put preprocess on the GPU (KIND_AUTO on a GPU machine)."""
    if importlib.util.find_spec("pytriton") is None:  # not imported: pytriton's own imports need more
        pytest.skip("the embedded server (nvidia-pytriton) is not installed here")
    server = request.getfixturevalue("server")
    text = server.log_path.read_text()
    assert "GPU executor on device" in text, "preprocess did not pick the GPU executor"
    assert "decoder nvImageCodec" in text, "the preprocess instance's log line does not name its GPU decoder"
    return server


@pytest.fixture(scope="session")
def topology():
    """The servers the launcher runs on this machine (one per visible GPU): where the tests take counts, labels
    and bounds from, so that none assumes one GPU."""
    from tritonprep.launcher import topology

    return topology.detect()
