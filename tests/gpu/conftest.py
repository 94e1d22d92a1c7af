"""GPU test fixtures: everything here is marked `gpu` and skips cleanly without CuPy or a GPU."""

from __future__ import annotations

import numpy as np
import pytest


def pytest_collection_modifyitems(items):
    for item in items:
        if "/tests/gpu/" in str(item.fspath):
            item.add_marker(pytest.mark.gpu)


@pytest.fixture(scope="session")
def cp():
    """The CuPy module, with a usable GPU; skips otherwise."""
    cupy = pytest.importorskip("cupy", reason="CuPy is not installed (GPU tests need tritonprep[gpu-cu13])")
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            pytest.skip("no CUDA device")
    except cupy.cuda.runtime.CUDARuntimeError as e:
        pytest.skip(f"no usable CUDA device: {e}")
    return cupy


@pytest.fixture(scope="session")
def nvimgcodec(cp):
    """nvImageCodec, or skip."""
    try:
        from nvidia import nvimgcodec as nv
    except ImportError as e:
        pytest.skip(f"nvImageCodec is not installed: {e}")
    return nv


def agreement(a: np.ndarray, b: np.ndarray) -> tuple[float, int]:
    """(fraction of values within 1 of each other, max |a - b|) of two uint8-scale arrays."""
    d = np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))
    return float((d <= 1.0 + 1e-3).mean()), int(np.ceil(d.max() - 1e-3))
