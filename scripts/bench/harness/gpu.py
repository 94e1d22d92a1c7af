"""GPU memory as ``nvidia-smi`` reports it: the machine's total and each process's, sampled in a thread.

Processes are named by what they are: a Triton Python stub by its model instance (``preprocess_0_1``),
anything else by its program. Without ``nvidia-smi`` (or a GPU) every reading is empty, never an error.
"""

from __future__ import annotations

import logging
import re
import subprocess
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from tritonprep_testkit.leftovers import gpu_snapshot

log = logging.getLogger("harness")
_POOL_METRIC = re.compile(r'^tritonprep_cupy_pool_bytes\{[^}]*kind="total"[^}]*\} (\S+)$', re.M)


def smi_text(*args: str) -> str:
    """``nvidia-smi ARGS``'s output, or "" without it."""
    try:
        return subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=30, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def process_name(pid: int) -> str:
    """``<instance name> (pid N)`` for a Triton Python stub, ``<program> (pid N)`` otherwise."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return f"pid {pid}"
    name = Path(argv[0].decode(errors="replace")).name
    if name == "triton_python_backend_stub" and len(argv) > 8:
        name = argv[8].decode(errors="replace")  # the instance name, e.g. preprocess_0_1
    return f"{name} (pid {pid})"


@dataclass
class Reading:
    """One look at the GPUs: MiB used on all of them, and by each process holding a CUDA context."""

    total_mib: int
    by_process: dict[str, int]


def read_gpu() -> Reading | None:
    """GPU memory now (summed over the GPUs), or None without nvidia-smi."""
    snap = gpu_snapshot()
    if snap is None:
        return None
    return Reading(sum(snap.memory_used_mb.values()), {process_name(p): mib for p, mib in snap.compute_apps.items()})


def gpu_memory_mib() -> int:
    """Used memory of the machine's GPUs, summed (MiB); -1 without nvidia-smi's answer."""
    reading = read_gpu()
    return -1 if reading is None else reading.total_mib


def gpu_memory_by_process() -> dict[str, int]:
    """GPU memory (MiB) each process holds, named by model instance for Triton's Python stubs."""
    reading = read_gpu()
    return {} if reading is None else reading.by_process


def cupy_pool_bytes(metrics_url: str) -> float:
    """CuPy's pool bytes summed over the instances (tritonprep's metric); ValueError/OSError if unreadable."""
    with urllib.request.urlopen(metrics_url, timeout=2) as r:  # noqa: S310 - localhost
        text = r.read().decode()
    return sum(float(v) for v in _POOL_METRIC.findall(text))


@dataclass
class GpuSampler:
    """Samples GPU memory (total and per process) every ``period`` seconds in a thread, and CuPy's pools where
    ``metrics_url`` answers; the peaks are kept, the totals as a time series."""

    period: float = 2.0
    metrics_url: str | None = None
    samples: list[tuple[float, int]] = field(default_factory=list)  # (t s, MiB on all GPUs)
    pools: list[tuple[float, float]] = field(default_factory=list)  # (t s, CuPy pool bytes over the instances)
    peak_by_process: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="gpu-sampler")
        self._t0 = time.monotonic()

    def elapsed(self) -> float:
        """Seconds since the sampler was created."""
        return round(time.monotonic() - self._t0, 1)

    def take(self) -> Reading | None:
        """One sample now (also kept in the series and the peaks)."""
        reading = read_gpu()
        if reading is not None:
            self.samples.append((self.elapsed(), reading.total_mib))
            for name, mib in reading.by_process.items():
                self.peak_by_process[name] = max(mib, self.peak_by_process.get(name, 0))
        return reading

    def _run(self) -> None:
        while not self._stop.is_set():
            self.take()
            if self.metrics_url:
                try:
                    self.pools.append((self.elapsed(), cupy_pool_bytes(self.metrics_url)))
                except (OSError, ValueError):
                    pass  # the server is starting or stopping
            self._stop.wait(self.period)

    @property
    def peak_mib(self) -> int:
        """The highest total sampled (-1 without a sample)."""
        return max((m for _, m in self.samples), default=-1)

    def __enter__(self) -> GpuSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
