"""What a non-editable install ships: the wheel built from a copy of the checkout, and what it must hold."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from .servers import REPO

#: the folders that hold the distribution's packages (pyproject.toml's ``packages.find.where``)
PACKAGE_ROOTS = ("backend", "client", "testkit")
#: package data, relative to ``backend/`` (pyproject.toml's ``package-data``)
DATA_PATTERNS = ("tritonprep/data/*.txt", "tritonprep/kernels/*.cu")


def expected_files(root: Path = REPO) -> set[str]:
    """Every module of every package (a folder with ``__init__.py``) under the package roots, and the package
    data, as paths inside the wheel (``tritonprep/pipeline/fused.py``)."""
    files: set[str] = set()
    for where in PACKAGE_ROOTS:
        base = root / where
        for init in base.rglob("__init__.py"):
            files |= {str(p.relative_to(base)) for p in init.parent.glob("*.py")}
    for pattern in DATA_PATTERNS:
        files |= {str(p.relative_to(root / "backend")) for p in (root / "backend").glob(pattern)}
    return files


def build_wheel(dest: Path, root: Path = REPO) -> Path:
    """``pip wheel --no-deps`` of a clean copy of the checkout (a stale ``build/`` in the checkout could
    otherwise put deleted modules into the wheel); returns the wheel's path."""
    src = dest / "src"
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "build")
    src.mkdir(parents=True)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(root / name, src / name)
    for where in PACKAGE_ROOTS:
        shutil.copytree(root / where, src / where, ignore=ignore)
    out = dest / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(src)],
        check=True,
        capture_output=True,
        text=True,
    )
    (wheel,) = out.glob("tritonprep-*.whl")
    return wheel
