"""Phase ``latency``: where one image's time goes at c=1, and how busy the GPU's parts are under load.

Per server setting, one server with the classify models and the sinks (the shipped instance counts; every
instance logs its phases every :data:`PROFILE_INTERVAL_S` seconds):

* for ``classify``, ``classify_fused`` and ``prep_sink`` in turn: perf_analyzer at c=1 (the C++ client's p50;
  it also warms the model), then a gRPC client in this process sends one 500x375 JPEG per request, one after
  the other: :data:`WARM_S` seconds, ``--latency-requests`` timed requests between two snapshots of Triton's
  statistics (every model version), then :data:`WARM_S` seconds more so that every instance logs the window's
  last interval. The round trips, the statistics' differences and the instances' profile lines of the window
  make the breakdown (:mod:`..breakdown`), in ``summary["latency"][setting][model]``, with the SM clock and
  power the timed requests ran at (:class:`..engines.ClockSampler`);
* the same models at the goals' throughput points of 8 and 32 images/request (:data:`LOAD_POINTS`), each with
  ``nvidia-smi dmon`` sampling the GPU every second (:mod:`..engines`): rows of kind ``gpu_profile`` with the
  means of the SMs, memory, the JPEG engines (``jpg``), NVDEC and, on Hopper, GPM's SM activity and occupancy
  and each NVJPG engine, and the SM clock.

Once per run: with ``--gpu-time FILE`` (scripts.bench.gpu_time's JSON lines, ``STEPS=gputime`` of
scripts/device/gpu_full.sh), its ``kernels`` rows go into the summary for the report's kernel table.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from tritonprep.triton.profiling import INTERVAL_ENV

from .. import breakdown, serving
from ..engines import ClockSampler, EngineSampler, compact
from ..repos import make_repo
from ..run import Run
from ..settings import Setting
from .classify import GOAL_POINTS

log = logging.getLogger("harness")

#: the models whose c=1 time is broken down, and that are measured under load
MODELS = ("classify", "classify_fused", "prep_sink")
#: (images per request, concurrency): the goals' throughput points of the classify phase, the highest concurrency
LOAD_POINTS = [(n, conc[-1]) for n, conc in GOAL_POINTS if n > 1]
#: seconds between two profile lines of an instance in this phase's server
PROFILE_INTERVAL_S = 2.0
#: seconds of requests before and after the timed ones (each instance's first line, which may straddle the
#: model before, is dropped; the last interval is logged only once the instance executes after it)
WARM_S = PROFILE_INTERVAL_S + 1.5


def once(run: Run, args: argparse.Namespace) -> None:
    """``--gpu-time``: the kernels rows of scripts.bench.gpu_time, for the report."""
    path: Path | None = getattr(args, "gpu_time", None)
    if not path:
        return
    if not path.is_file():
        log.warning("--gpu-time %s: no such file; the report has no kernel table", path)
        return
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip().startswith("{")]
    run.summary["gpu_time_kernels"] = [r for r in rows if r.get("part") == "kernels"]
    run.save()


class Client:
    """One gRPC connection sending ``model`` one image per request, cycling through ``images``."""

    def __init__(self, url: str, model: str, images: list[bytes], headers: dict[str, str]) -> None:
        import numpy as np
        import tritonclient.grpc as grpcclient

        self.client = grpcclient.InferenceServerClient(url)
        self.model, self.headers = model, headers
        self.inputs = []
        for data in images[:64]:
            x = grpcclient.InferInput("IMAGE", [1, 1], "BYTES")
            x.set_data_from_numpy(np.array([[data]], dtype=np.object_))
            self.inputs.append(x)
        self.sent = 0

    def send(self) -> float:
        """One request; its round trip in ms."""
        x = self.inputs[self.sent % len(self.inputs)]
        self.sent += 1
        t0 = time.perf_counter()
        self.client.infer(self.model, [x], client_timeout=60)
        return (time.perf_counter() - t0) * 1e3

    def keep_sending(self, seconds: float) -> None:
        """Requests, untimed, for ``seconds``."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.send()

    def statistics(self) -> dict[tuple[str, str], dict[str, Any]]:
        """Triton's statistics of every model version now."""
        answer = self.client.get_inference_statistics(headers=self.headers, as_json=True, client_timeout=30)
        return breakdown.stats_by_version(answer)

    def steps(self) -> list[tuple[str, str]]:
        """The ensemble's steps (model, version); [] for a model that is not an ensemble."""
        config = self.client.get_model_config(self.model, headers=self.headers, as_json=True, client_timeout=30)
        return breakdown.composing_steps(config)

    def close(self) -> None:
        self.client.close()


def one_model(run: Run, srv: serving.Served, model: str, requests: int) -> dict[str, Any]:
    """The c=1 breakdown of ``model`` (:func:`..breakdown.breakdown`)."""
    pa = run.measure(srv, model, [1], [1])
    for r in pa:
        run.rows.append({"kind": "latency", "config": model, "size": "500x375", **srv.setting.row_fields(),
                         "server": srv.tag, **asdict(r)})  # fmt: skip
    headers = getattr(srv.server, "grpc_admin_headers", {})
    client = Client(srv.urls["grpc"], model, run.sets["500x375"], headers)
    try:
        steps = client.steps()
        offset = srv.log_path.stat().st_size if srv.log_path.is_file() else 0
        client.keep_sending(WARM_S)
        before = client.statistics()
        with ClockSampler() as clocks:
            times = [client.send() for _ in range(requests)]
        after = client.statistics()
        client.keep_sending(WARM_S)
    finally:
        client.close()
    time.sleep(0.5)  # the stubs' last lines reach the log
    lines = serving.log_lines(srv.log_path, "profile ", first=1_000_000, offset=offset)
    served_versions = breakdown.resolve([(model, "-1")], before, after)
    if not served_versions:
        raise RuntimeError(f"{model}: Triton's statistics counted no request of the {requests} sent")
    own = max(served_versions, key=lambda v: v.requests)
    composing = breakdown.resolve(steps, before, after)
    entry = breakdown.breakdown(model, times, own, composing, breakdown.profile_per_request(lines),
                                pa[0].p50_ms if pa else None)  # fmt: skip
    entry["clocks"] = clocks.result()
    log.info("latency %s (%s): client p50 %.2f ms, server %.2f ms; %s", model, srv.setting.label,
             entry["client"]["p50_ms"], own.request_ms,
             "; ".join(f"{label} {ms:.2f}" for label, ms, level in entry["rows"] if level == 2))  # fmt: skip
    return entry


def served(run: Run, args: argparse.Namespace, setting: Setting) -> None:
    """The c=1 breakdowns, then the load points with the GPU sampled."""
    repo = make_repo(run.work / "repo-latency", with_classify=True)
    env = {INTERVAL_ENV: str(PROFILE_INTERVAL_S), "TRITONPREP_PROFILE": "1"}
    with run.serve("latency", repo, setting, env=env) as srv:
        found = run.summary.setdefault("latency", {}).setdefault(setting.label, {})
        for model in MODELS:
            try:
                found[model] = one_model(run, srv, model, getattr(args, "latency_requests", 1000))
            except Exception as e:  # noqa: BLE001 - one model's breakdown failing leaves the others
                log.exception("latency %s (%s) failed", model, setting.label)
                run.summary.setdefault("errors", []).append(f"phase latency, {model} ({setting.label}): {e}")
            run.save()
        for n, conc in LOAD_POINTS:
            for model in MODELS:
                with EngineSampler() as sampler, ClockSampler() as clocks:
                    res = run.measure(srv, model, [n], [conc])
                engines = sampler.result()
                for r in res:
                    run.rows.append({"kind": "gpu_profile", "config": model, "size": "500x375",
                                     **srv.setting.row_fields(), "server": srv.tag, "engines": engines,
                                     "clocks": clocks.result(), "gpu_util": compact(engines),
                                     **asdict(r)})  # fmt: skip
                    log.info("gpu_profile %s b%d c%d: %.0f img/s; GPU %s", model, n, conc, r.images_per_s,
                             compact(engines) or "not sampled")  # fmt: skip
                run.save()
