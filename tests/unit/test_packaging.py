"""What an install gets: with the CPU extra ONNX Runtime's CPU build, with a GPU extra its GPU build, never both;
the wheel holds every package and the model repository with the exported networks, and no test kit."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]


def extras() -> dict[str, list[Requirement]]:
    from importlib.metadata import requires

    out: dict[str, list[Requirement]] = {}
    for text in requires("tritonprep") or []:
        req = Requirement(text)
        match = re.search(r'extra == "([^"]+)"', str(req.marker))
        if match:
            out.setdefault(match.group(1), []).append(req)
    return out


@pytest.mark.parametrize(
    ("combination", "runtime"),
    [
        (("server", "cpu"), "onnxruntime"),
        (("server", "gpu-cu13"), "onnxruntime-gpu"),
        (("server", "gpu-cu12"), "onnxruntime-gpu"),
    ],
)
def test_each_install_gets_exactly_one_onnxruntime_build(combination, runtime):
    found = extras()
    names = {r.name for extra in combination for r in found[extra]}
    assert {n for n in names if n.startswith("onnxruntime")} == {runtime}


def test_the_gpu_extras_bring_cuda_and_cudnn_with_onnxruntime():
    for extra, cuda in (("gpu-cu13", "13"), ("gpu-cu12", "12")):
        ort = next(r for r in extras()[extra] if r.name == "onnxruntime-gpu")
        assert ort.extras == {"cuda", "cudnn"}, extra
        assert {f"cupy-cuda{cuda}x", f"nvidia-nvimgcodec-cu{cuda}"} <= {r.name for r in extras()[extra]}
    cu12 = next(r for r in extras()["gpu-cu12"] if r.name == "onnxruntime-gpu")
    assert cu12.specifier.contains("1.26.0") and not cu12.specifier.contains("1.27.0")  # 1.27+ is CUDA 13


@pytest.mark.parametrize(
    ("gpu", "extra", "removed"), [("none", "cpu", "onnxruntime-gpu"), ("cu13", "gpu-cu13", "onnxruntime")]
)
def test_make_setup_installs_one_build_and_removes_the_other(gpu, extra, removed):
    """`make setup` (dry run) picks the extra for GPU=... and uninstalls the other ONNX Runtime build first."""
    out = subprocess.run(
        ["make", "-n", "-B", "setup", f"GPU={gpu}"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    assert "pip uninstall" in out and f" -y {removed}" in out
    assert f"'.[server,{extra},test]'" in out


@pytest.fixture(scope="module")
def wheel_files(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    """The files of the wheel that `pip wheel .` builds from this checkout."""
    import zipfile

    from tritonprep_testkit.packaging import build_wheel

    with zipfile.ZipFile(build_wheel(tmp_path_factory.mktemp("wheel"))) as wheel:
        return {name for name in wheel.namelist() if ".dist-info/" not in name}


def test_the_wheel_holds_every_package_data_file_and_the_model_repository(wheel_files):
    """A non-editable install (`pip install .`, a container image) gets every package, found rather than
    listed: a hand-kept list once left out tritonprep.pipeline, so classify_fused could not import. It serves
    by itself: the model repository with the exported networks is in it; the test kit is not."""
    from tritonprep_testkit.packaging import NETWORKS, PACKAGED_REPOSITORY, expected_files

    expected = expected_files()
    assert {"tritonprep/pipeline/fused.py", "tritonprep/data/imagenet_labels.txt"} <= expected
    assert {"tritonprep/kernels/resize_normalize.cu", "tritonprep/kernels/half.cuh"} <= expected
    assert "tritonprep_client/cli.py" in expected
    repository = {f"{PACKAGED_REPOSITORY}/{name}" for name in NETWORKS}
    repository |= {f"{PACKAGED_REPOSITORY}/{m}/config.pbtxt" for m in ("classify", "preprocess", "classifier")}
    repository |= {f"{PACKAGED_REPOSITORY}/classifier/1/model.py", f"{PACKAGED_REPOSITORY}/classify/1/.gitkeep"}
    assert repository <= expected
    assert sorted(expected - wheel_files) == []
    assert sorted(f for f in wheel_files - expected if not f.endswith(".py")) == []  # nothing stray
    assert not [f for f in wheel_files if f.startswith("tritonprep_testkit/")]
    assert not [f for f in wheel_files if f.endswith((".plan", ".pyc", "timing.cache"))]


def test_a_wheel_without_the_exported_networks_is_refused(tmp_path):
    """setup.py packs what `make model` exported; a build where a network is missing fails, saying what to run."""
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy2(ROOT / name, tmp_path / name)
    shutil.copytree(ROOT / "client", tmp_path / "client", ignore=shutil.ignore_patterns("__pycache__"))  # a package
    classifier = tmp_path / "model_repository" / "classifier"
    (classifier / "1").mkdir(parents=True)
    shutil.copy2(ROOT / "model_repository" / "classifier" / "config.pbtxt", classifier)
    r = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path / "dist"), str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode != 0 and not list((tmp_path / "dist").glob("*.whl"))
    assert "model_repository/classifier/1/model.onnx is missing (6 of the exported networks): run `make model`" in (
        r.stdout + r.stderr
    )


def test_nothing_writes_into_a_read_only_repository(tmp_path, monkeypatch):
    """An installed wheel's repository may be read-only (site-packages): the embedded TensorRT runtime keeps its
    engines beside the ONNX file only where that folder is writable, else in the start-up cache."""
    from tritonprep.classifier.tensorrt import engine_folder
    from tritonprep.errors import RuntimeUnavailable

    onnx = tmp_path / "repo" / "classifier" / "1" / "model.onnx"
    onnx.parent.mkdir(parents=True)
    onnx.touch()
    assert engine_folder(onnx) == onnx.parent
    monkeypatch.setattr(os, "access", lambda path, mode: Path(path) != onnx.parent)
    monkeypatch.setenv("TRITONPREP_CACHE_DIR", str(tmp_path / "cache"))
    folder = engine_folder(onnx)
    assert folder.parent == tmp_path / "cache" / "tensorrt" and folder.is_dir()
    assert engine_folder(onnx) == folder  # the same ONNX file, the same folder
    monkeypatch.setenv("TRITONPREP_CACHE_DIR", "off")
    with pytest.raises(RuntimeUnavailable, match="is read-only and there is no start-up cache"):
        engine_folder(onnx)


def test_packages_are_found_not_listed():
    text = (ROOT / "pyproject.toml").read_text()
    assert "[tool.setuptools.packages.find]" in text and "packages = [" not in text
