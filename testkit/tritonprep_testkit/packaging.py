"""What a non-editable install ships: the wheel built from a copy of the checkout, and what it must hold.

The wheel holds the packages of ``backend/`` and ``client/`` with their data, and the model repository with
the networks of ``make model`` (setup.py packs it as ``tritonprep/model_repository/``); never the test kit.
"""

from __future__ import annotations

import fnmatch
import shutil
import subprocess
import sys
from pathlib import Path

from .servers import REPO

#: the folders that hold the distribution's packages (pyproject.toml's ``packages.find.where``)
PACKAGE_ROOTS = ("backend", "client")
#: package data, relative to ``backend/`` (pyproject.toml's ``package-data``)
DATA_PATTERNS = ("tritonprep/data/*.txt", "tritonprep/kernels/*.cu", "tritonprep/kernels/*.cuh")
#: the model repository inside the wheel
PACKAGED_REPOSITORY = "tritonprep/model_repository"
#: what runtimes and Python write beside the models: never in the wheel
WRITTEN_BESIDE_MODELS = ("__pycache__", "*.pyc", "*.plan", "*.plan.*", "timing.cache*", "ort-trt-cache", "*.tmp")
#: the networks `make model` exports, which the wheel must carry
NETWORKS = (
    "classifier/1/model.onnx",
    "classifier/1/model.fp16.onnx",
    "classifier/1/model.fp16.nhwc.onnx",
    "embedder/1/model.onnx",
    "embedder/1/model.fp16.onnx",
    "embedder/1/model.fp16.nhwc.onnx",
)


def repository_files(root: Path = REPO) -> set[str]:
    """The files of the checkout's model repository that the wheel carries, as paths inside the wheel."""
    base = root / "model_repository"
    files = set()
    for path in base.rglob("*"):
        parts = path.relative_to(base).parts
        if path.is_dir() or any(fnmatch.fnmatch(p, pat) for p in parts for pat in WRITTEN_BESIDE_MODELS):
            continue
        files.add(f"{PACKAGED_REPOSITORY}/{'/'.join(parts)}")
    return files


def expected_files(root: Path = REPO) -> set[str]:
    """Every module of every package (a folder with ``__init__.py``) under the package roots, the package
    data and the model repository, as paths inside the wheel (``tritonprep/pipeline/fused.py``)."""
    files: set[str] = set()
    for where in PACKAGE_ROOTS:
        base = root / where
        for init in base.rglob("__init__.py"):
            files |= {str(p.relative_to(base)) for p in init.parent.glob("*.py")}
    for pattern in DATA_PATTERNS:
        files |= {str(p.relative_to(root / "backend")) for p in (root / "backend").glob(pattern)}
    return files | repository_files(root)


def build_wheel(dest: Path, root: Path = REPO) -> Path:
    """``pip wheel --no-deps`` of a clean copy of the checkout (a stale ``build/`` in the checkout could
    otherwise put deleted modules into the wheel), the model repository included; returns the wheel's path."""
    src = dest / "src"
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "build", *WRITTEN_BESIDE_MODELS)
    src.mkdir(parents=True)
    for name in ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md"):
        shutil.copy2(root / name, src / name)
    for where in (*PACKAGE_ROOTS, "model_repository"):
        shutil.copytree(root / where, src / where, ignore=ignore, symlinks=True)
    out = dest / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(src)],
        check=True,
        capture_output=True,
        text=True,
    )
    (wheel,) = out.glob("tritonprep-*.whl")
    return wheel
