"""Where the nvidia-pytriton wheel put tritonserver, its Python backend and libraries, and the GPUs it will see."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from ..errors import ServerError


@dataclass(frozen=True)
class TritonInstall:
    """Where the pytriton wheel put tritonserver, its Python backend and its libraries."""

    binary: Path
    python_backend: Path
    stub: Path
    libs: Path

    @classmethod
    def find(cls) -> TritonInstall:
        """Locate the files of the installed ``nvidia-pytriton`` wheel."""
        spec = importlib.util.find_spec("pytriton")
        if spec is None or not spec.submodule_search_locations:
            raise ServerError(
                "the embedded server needs the nvidia-pytriton wheel: pip install 'tritonprep[server]' "
                "(or run `make serve`, which sets up .venv)"
            )
        root = Path(next(iter(spec.submodule_search_locations))) / "tritonserver"
        py = f"{sys.version_info.major}.{sys.version_info.minor}"
        install = cls(
            binary=root / "bin" / "tritonserver",
            python_backend=root / "backends" / "python",
            stub=root / "python_backend_stubs" / py / "triton_python_backend_stub",
            libs=root.parent.parent / "nvidia_pytriton.libs",
        )
        for path in (install.binary, install.python_backend, install.stub):
            if not path.exists():
                raise ServerError(f"{path} is missing: nvidia-pytriton has no Triton build for Python {py} here")
        return install

    def make_backend_dir(self, dest: Path) -> Path:
        """Copy the Python backend and this Python's stub into ``dest/python``; return ``dest``."""
        python_dir = dest / "python"
        python_dir.mkdir(parents=True, exist_ok=True)
        for src in list(self.python_backend.iterdir()) + [self.stub]:
            if src.is_file():
                shutil.copy2(src, python_dir / src.name)
        return dest


def visible_gpus(selected: tuple[int, ...] | None = None) -> list[str]:
    """The GPUs tritonserver will see, as ``CUDA_VISIBLE_DEVICES`` entries of this process's numbering.

    ``selected`` picks some of the GPUs this process sees (by their index, 0 being the first it sees);
    None keeps them all. An index it does not see is a :class:`ServerError` naming the ones it does.
    """
    count = gpu_count()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    ids = (
        [d.strip() for d in visible.split(",") if d.strip()][:count]
        if visible is not None
        else [str(i) for i in range(count)]
    )
    if selected is None:
        return ids
    missing = [i for i in selected if not 0 <= i < len(ids)]
    if missing:
        raise ServerError(
            f"--gpus {','.join(map(str, selected))}: this machine shows {len(ids)} GPU(s) "
            f"({', '.join(map(str, range(len(ids)))) or 'none'}); {missing} do not exist"
        )
    return [ids[i] for i in selected]


def gpu_count() -> int:
    """Number of visible GPUs (0 without a driver); used to size per-GPU memory pools."""
    if shutil.which("nvidia-smi") is None:
        return 0
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    count = sum(1 for line in out.splitlines() if line.startswith("GPU "))
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        count = min(count, len([d for d in visible.split(",") if d.strip()]))
    return count


@dataclass(frozen=True)
class GpuInfo:
    """One GPU as ``nvidia-smi`` shows it."""

    index: str
    uuid: str
    name: str
    total_mb: int
    used_mb: int


def smi_query(query: str) -> str | None:
    """``nvidia-smi --query-...=...`` (``query``, e.g. ``--query-gpu=index,name``) as csv without header or units;
    None without nvidia-smi or when it fails."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        return subprocess.run(
            ["nvidia-smi", query, "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None


def gpu_info(ids: list[str]) -> list[GpuInfo]:
    """The GPUs ``ids`` names (``CUDA_VISIBLE_DEVICES`` entries: indices or UUIDs), as nvidia-smi shows them;
    [] without nvidia-smi or where none matches."""
    out = smi_query("--query-gpu=index,uuid,name,memory.total,memory.used") if ids else None
    if out is None:
        return []
    found = {}
    for line in out.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) == 5 and fields[3].isdigit():
            used = int(fields[4]) if fields[4].isdigit() else 0
            found[fields[0]] = GpuInfo(fields[0], fields[1], fields[2], int(fields[3]), used)
    chosen = []
    for entry in ids:
        match = found.get(entry) or next((g for g in found.values() if entry and g.uuid.startswith(entry)), None)
        if match is not None:
            chosen.append(match)
    return chosen
