"""What a measurement kept busy: the GPUs' mean utilization (``nvidia-smi dmon``) and the host's busy CPUs
(/proc/stat) while it ran. Every served throughput measurement records the busiest GPU's and the host's
(:meth:`..run.Run.sweep`; a c=1 point the host's alone: no ``nvidia-smi`` beside a latency): where the host's CPUs
are all busy, the server's host work, not the GPU, sets the pace."""

from __future__ import annotations

import os

from .engines import EngineSampler, busiest
from .engines import means as engine_means


def cpu_jiffies() -> tuple[int, int]:
    """(busy, total) jiffies of every CPU of the host since boot (/proc/stat's first line); (0, 0) without it."""
    try:
        fields = [int(v) for v in open("/proc/stat").readline().split()[1:]]  # noqa: SIM115 - one line
    except (OSError, ValueError):
        return 0, 0
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields) - idle, sum(fields)


class Utilization:
    """Each GPU's mean utilization while the ``with`` block runs (the ``sm`` column of
    :class:`..engines.EngineSampler`, ``nvidia-smi dmon`` every second), and how many of the host's CPUs were busy
    meanwhile (/proc/stat)."""

    def __init__(self, gpu: bool = True) -> None:
        """``gpu``: sample the GPUs too (False: the host's CPUs alone)."""
        self.sampler = EngineSampler()
        self.gpu = gpu
        self._cpu0 = self._cpu1 = (0, 0)

    def host_cpu_cores(self) -> float:
        """The host's busy CPUs (in cores) over the sampling: all processes, servers and load generator."""
        busy, total = self._cpu1[0] - self._cpu0[0], self._cpu1[1] - self._cpu0[1]
        return round(busy / total * (os.cpu_count() or 1), 1) if total > 0 else 0.0

    def means(self) -> str:
        """``0:97 1:95`` (GPU index: mean %, each GPU's first and last sample left out), "" without samples."""
        by_gpu = engine_means(self.sampler.samples)
        order = sorted(by_gpu, key=lambda gpu: (not gpu.isdigit(), int(gpu) if gpu.isdigit() else 0, gpu))
        return " ".join(f"{gpu}:{by_gpu[gpu]['sm']:.0f}" for gpu in order if "sm" in by_gpu[gpu])

    def busy(self) -> str:
        """``sm 88 %, smutil 67 %, jpg 85 %``: the busiest GPU's mean SM (NVML), SM activity (GPM) and JPEG engine
        utilization, those sampled; "" without samples."""
        found = busiest(engine_means(self.sampler.samples))
        if found is None:
            return ""
        values = found[1]
        return ", ".join(f"{k} {values[k]:.0f} %" for k in ("sm", "smutil", "jpg") if k in values)

    def __enter__(self) -> Utilization:
        self._cpu0 = cpu_jiffies()
        if self.gpu:
            self.sampler.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.gpu:
            self.sampler.__exit__(*exc)
        self._cpu1 = cpu_jiffies()
