"""Phase ``gpus``: the GPU-count axis, 1 vs 2 vs 4 GPUs of the same host in one run.

For each count N of ``--gpu-counts`` (default: 1, 2, 4, ... up to every GPU this machine shows), the shipped
repository (its queues opened up, their timeouts off: capacity is measured) with the launcher's defaults on GPUs
0..N-1 (a tritonserver per GPU on shared ports: the launcher's default), then ``classify``, ``classify_fused``
and ``embed`` at 8 images/request and concurrency 64 x N, at 32 and 16 x N, and at 1 image with concurrency 1.
The load comes from one perf_analyzer process (several would each measure windows of their own, not the same
seconds), each concurrency slot on a connection of its own (``TRITON_CLIENT_GRPC_CHANNEL_MAX_SHARE_COUNT=1``), so
that the kernel spreads them over the servers; the per-model statistics come from the host endpoint (every
server's), perf_analyzer's own server columns from the one server its statistics connection reached. Each row
records the load generator's CPU use (cores), the host's busy CPUs (every process) and each GPU's mean
utilization during the measurement (``nvidia-smi dmon`` every second, :class:`..engines.EngineSampler`). The
servers' records give the launch to ready and the stop per count. The report's "GPU count" section puts the
counts side by side against the goals.
"""

from __future__ import annotations

import argparse
import logging
import os

from ..engines import EngineSampler
from ..engines import means as engine_means
from ..repos import open_copy
from ..run import Run
from ..settings import Setting, parse_counts

log = logging.getLogger("harness")

#: (model, images per request, concurrency per GPU); c=1 stays 1 whatever the count
POINTS = [(m, n, c) for m in ("classify", "classify_fused", "embed") for n, c in ((8, 64), (32, 16), (1, 1))]
#: each concurrency slot of perf_analyzer on a gRPC connection of its own (tritonclient shares one between 6)
SPREAD_ENV = {"TRITON_CLIENT_GRPC_CHANNEL_MAX_SHARE_COUNT": "1"}


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

    def __init__(self) -> None:
        self.sampler = EngineSampler()
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

    def __enter__(self) -> Utilization:
        self._cpu0 = cpu_jiffies()
        self.sampler.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.sampler.__exit__(*exc)
        self._cpu1 = cpu_jiffies()


def served(run: Run, args: argparse.Namespace, setting: Setting) -> None:
    """Each GPU count: the shipped repository on that many GPUs, every point, with the load generator's CPU and
    each GPU's utilization."""
    from tritonprep.launcher.install import gpu_count

    visible = gpu_count()
    repo = open_copy(run.work / "repo-gpus")
    for n in parse_counts(args.gpu_counts, visible) if visible else [1]:  # no GPU: the CPU host, once
        options = {"gpus": tuple(range(n))} if visible else {}
        with run.serve(f"gpus-{n}", repo, setting, options=options) as srv:
            srv.record["loaded"] = True
            for model, batch, conc in POINTS:
                concurrency = conc * n if conc > 1 else 1
                with Utilization() as util:
                    res = run.measure(srv, model, [batch], [concurrency], env=SPREAD_ENV)
                for r in res:
                    row = {"kind": "gpus", "config": model, "size": "500x375", **srv.setting.row_fields(),
                           "server": srv.tag, "gpus": n, "gpu_util": util.means(),
                           "host_cpu_cores": util.host_cpu_cores(), **r.__dict__}  # fmt: skip
                    log.info("gpus=%d %s b%d c%d: %.0f img/s p50 %.2f ms; client %.1f cores, host %.1f of %d cores; "
                             "GPU util %s", n, model, batch, concurrency, r.images_per_s, r.p50_ms,
                             r.client_cpu_cores, row["host_cpu_cores"], os.cpu_count(), row["gpu_util"])  # fmt: skip
                    run.rows.append(row)
                run.save()
            # the classifier logs its first input that arrived from another GPU (cross_device_copies): none, as
            # each server sees one GPU
            srv.record["cross_device_copies"] = srv.log_lines("arrived from another GPU", 3)
