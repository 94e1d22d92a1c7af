"""The install extras: a CPU install gets ONNX Runtime's CPU build, a GPU install its GPU build, never both."""

from __future__ import annotations

import re
import subprocess
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


def test_the_wheel_holds_every_package_and_data_file_of_the_tree(wheel_files):
    """A non-editable install (`pip install .`, a container image) gets every package, found rather than
    listed: a hand-kept list once left out tritonprep.pipeline, so classify_fused could not import."""
    from tritonprep_testkit.packaging import expected_files

    expected = expected_files()
    assert {"tritonprep/pipeline/fused.py", "tritonprep/data/imagenet_labels.txt"} <= expected
    assert {"tritonprep/kernels/resize_normalize.cu", "tritonprep_client/cli.py"} <= expected
    assert sorted(expected - wheel_files) == []
    assert sorted(f for f in wheel_files - expected if not f.endswith(".py")) == []  # nothing stray


def test_packages_are_found_not_listed():
    text = (ROOT / "pyproject.toml").read_text()
    assert "[tool.setuptools.packages.find]" in text and "packages = [" not in text
