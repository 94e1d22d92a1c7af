"""Phase ``gpus``: the GPU-count axis, 1 vs 2 vs 4 GPUs of the same host in one run.

For each count N of ``--gpu-counts`` (default: 1, 2, 4, ... up to every GPU this machine shows), the shipped repository
(its queues opened up, their timeouts off: capacity is measured) with the launcher's defaults on GPUs 0..N-1 (a
tritonserver per GPU on shared ports: the launcher's default) but for two (:func:`server_options`): the front queue's
timeout off, and twice the launcher's CUDA pool per GPU. The launcher's admission sizes the queues to the pool: opened
up, the classifier's and the embedder's queues share it evenly, 31 requests each in the default 1,536 MiB, and the
8-image points at c=64 were refused (stage 22); in twice the pool each admits 71. Then ``classify``, ``classify_fused``
and ``embed`` at 8 images/request and concurrency 64 x N, at 32 and 16 x N, and at 1 image with concurrency 1. The load
comes from one perf_analyzer process (several would each measure windows of their own, not the same seconds), each
concurrency slot on a connection of its own (``TRITON_CLIENT_GRPC_CHANNEL_MAX_SHARE_COUNT=1``), so that the kernel
spreads them over the servers; the per-model statistics come from the host endpoint (every server's), perf_analyzer's
own server columns from the one server its statistics connection reached. Each row records the load generator's CPU use
(cores), the host's busy CPUs (every process) and each GPU's mean utilization during the measurement (``nvidia-smi
dmon`` every second, :class:`..engines.EngineSampler`). The servers' records give the launch to ready and the stop per
count. The report's "GPU count" section puts the counts side by side against the goals.
"""

from __future__ import annotations

import argparse
import logging
import os

from ..repos import open_copy
from ..run import Run
from ..serving import BENCH_OPTIONS
from ..settings import Setting, parse_counts
from ..utilization import Utilization

log = logging.getLogger("harness")

#: (model, images per request, concurrency per GPU); c=1 stays 1 whatever the count
POINTS = [(m, n, c) for m in ("classify", "classify_fused", "embed") for n, c in ((8, 64), (32, 16), (1, 1))]
#: each concurrency slot of perf_analyzer on a gRPC connection of its own (tritonclient shares one between 6)
SPREAD_ENV = {"TRITON_CLIENT_GRPC_CHANNEL_MAX_SHARE_COUNT": "1"}


def server_options(gpus: int) -> dict[str, object]:
    """The options of the server on ``gpus`` GPUs (0: the CPU host): the launcher's, with the front queue's timeout
    off and twice its CUDA pool per GPU (see the module's description)."""
    from tritonprep.launcher.options import ServerOptions

    if not gpus:
        return {}
    pool = 2 * ServerOptions.cuda_memory_pool_mb
    timeout = BENCH_OPTIONS["queue_timeout_ms"]
    return {"gpus": tuple(range(gpus)), "queue_timeout_ms": timeout, "cuda_memory_pool_mb": pool}


def served(run: Run, args: argparse.Namespace, setting: Setting) -> None:
    """Each GPU count: the shipped repository on that many GPUs, every point, with the load generator's CPU and
    each GPU's utilization."""
    from tritonprep.launcher.install import gpu_count

    visible = gpu_count()
    repo = open_copy(run.work / "repo-gpus")
    for n in parse_counts(args.gpu_counts, visible) if visible else [1]:  # no GPU: the CPU host, once
        with run.serve(f"gpus-{n}", repo, setting, options=server_options(n if visible else 0)) as srv:
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
