"""Fixtures of the unit tests shared by more than one module: docker/compose.yaml as read (``raw_compose``),
as `docker compose up` sees it with every default and an admin key (``compose``), and its NGC server
(``triton``); for the engine builds, a classifier ONNX beside its configs (``onnx``), no TensorRT at all
(``no_tensorrt``) and a fake ``trtexec`` (``fake_trtexec``)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.container_files import COMPOSE, ENV, interpolate
from tests.unit.engine_fakes import CLASSIFIER, FAKE_TRTEXEC
from tritonprep.classifier import builders as trt_builders


@pytest.fixture(scope="module")
def raw_compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


@pytest.fixture(scope="module")
def compose(raw_compose) -> dict[str, Any]:
    """The compose file with the defaults of every variable and a TRITON_ADMIN_KEY, as `up` sees it."""
    return interpolate(raw_compose, ENV)


@pytest.fixture(scope="module")
def triton(compose) -> dict[str, Any]:
    return compose["services"]["triton"]


@pytest.fixture
def onnx(tmp_path: Path) -> Path:
    """An ONNX file in a classifier model folder, beside the configs that declare its input."""
    path = tmp_path / "classifier" / "1" / "model.onnx"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"onnx bytes v1")
    (path.parent.parent / "configs").mkdir()
    shutil.copy(CLASSIFIER / "configs" / "tensorrt.pbtxt", path.parent.parent / "configs")
    return path


@pytest.fixture
def no_tensorrt(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No tensorrt module, no trtexec on PATH or at NVIDIA's default path."""
    monkeypatch.setitem(sys.modules, "tensorrt", None)  # import raises ImportError
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    monkeypatch.setattr(trt_builders, "TRTEXEC_DEFAULT", tmp_path / "no" / "trtexec")


@pytest.fixture
def fake_trtexec(tmp_path: Path) -> Path:
    exe = tmp_path / "bin" / "trtexec"
    exe.parent.mkdir()
    exe.write_text(FAKE_TRTEXEC)
    exe.chmod(0o755)
    return exe
