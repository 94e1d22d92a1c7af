"""The harness's ``latency`` phase, its pure parts (scripts/bench/harness/breakdown.py): Triton's statistics per
model version and their differences, the instances' profile lines, the c=1 breakdown and its table, the CUPTI
kernel table, the phase's options and its glue. No GPU, no server (the GPU samplers: test_harness_engines.py)."""

from __future__ import annotations

import json
import logging

import pytest

from scripts.bench.harness import breakdown, driver, engines
from scripts.bench.harness.breakdown import ModelTimes
from scripts.bench.harness.report import write_report
from tests.unit.test_harness_engines import gpu_profile_row
from tritonprep.triton import profiling

log = logging.getLogger(__name__)
MS = 1_000_000  # ns


def entry(name: str, version: str, requests: int, executes: int, request_ms: float, **parts_ms: float) -> dict:
    """A model_stats entry as tritonclient.grpc's ``as_json`` gives it: 64-bit counters as strings, zeros absent."""
    stats = {"success": {"count": str(requests), "ns": str(int(request_ms * requests * MS))}}
    for part, ms in parts_ms.items():
        stats[part] = {"count": str(requests), "ns": str(int(ms * requests * MS))}
    return {"name": name, "version": version, "inference_count": str(requests), "execution_count": str(executes),
            "inference_stats": stats}  # fmt: skip


def answer(*entries: dict) -> dict:
    return {"model_stats": list(entries)}


#: before: what the warm-up left; after: 1000 more requests of classify (4 preprocess instances, 2 classifiers)
BEFORE = answer(
    entry("classify", "1", 500, 500, 3.0, queue=0.1, compute_infer=2.0),
    entry("preprocess", "1", 700, 690, 1.9, queue=0.05, compute_input=0.08, compute_infer=1.6, compute_output=0.06),
    entry("classifier", "1", 500, 500, 1.6, queue=0.04, compute_input=0.1, compute_infer=1.4, compute_output=0.05),
    entry("classifier", "2", 10, 10, 9.0, compute_infer=9.0),  # another version, idle in the window
    {"name": "embedder", "version": "1"},  # never used: no counters at all
)
AFTER = answer(
    entry("classify", "1", 1500, 1500, 3.6, queue=0.1, compute_infer=2.0),
    entry("preprocess", "1", 1700, 1690, 1.9, queue=0.05, compute_input=0.08, compute_infer=1.6, compute_output=0.06),
    entry("classifier", "1", 1500, 1500, 1.6, queue=0.04, compute_input=0.1, compute_infer=1.4, compute_output=0.05),
    entry("classifier", "2", 10, 10, 9.0, compute_infer=9.0),
    {"name": "embedder", "version": "1"},
)
STEPS = [{"model_name": "preprocess", "model_version": "-1"}, {"model_name": "classifier", "model_version": "-1"}]
CONFIG = {"config": {"name": "classify", "platform": "ensemble", "ensemble_scheduling": {"step": STEPS}}}


def profile(instance: str, rate: float, **phases: float) -> str:
    parts = " ".join(f"{k}={v:.2f}ms" for k, v in sorted(phases.items()))
    return (f'I1127 10:00:00.000 1 pb_stub.cc:400] "tritonprep.triton.profiling: profile {instance}: {rate:.0f} exec/s '
            f'{rate:.0f} req/s {rate:.0f} img/s, batch 1.0 img, per execute: {parts}"')  # fmt: skip


PREP = {"read": 0.07, "preprocess": 1.20, "respond": 0.08, "decode_gpu_s": 0.70, "decode_s": 0.70, "total_s": 1.05}
NET = {"read": 0.05, "run": 1.05, "respond": 0.10, "turn_wait": 0.01, "network": 0.90, "top_k": 0.08}
LINES = [
    profile("preprocess_0_0", 90, **{**PREP, "preprocess": 9.0}),  # straddles the model before: dropped
    profile("preprocess_0_1", 90, **{**PREP, "preprocess": 9.0}),
    profile("classifier_0_0", 150, **NET),
    profile("classifier_0_1", 150, **NET),
    "I1127 10:00:01.000 1 model.py:1] something else",
    profile("preprocess_0_0", 100, **PREP),
    profile("preprocess_0_1", 50, **PREP),
    profile("classifier_0_0", 100, **NET),
    profile("classifier_0_1", 100, **NET),
    profile("preprocess_0_0", 0, **PREP),  # no executes: no weight
]


def classify_breakdown() -> dict:
    before, after = breakdown.stats_by_version(BEFORE), breakdown.stats_by_version(AFTER)
    (own,) = breakdown.resolve([("classify", "-1")], before, after)
    composing = breakdown.resolve(breakdown.composing_steps(CONFIG), before, after)
    client = [4.4 + 0.001 * i for i in range(401)]  # p50 4.6
    return breakdown.breakdown("classify", client, own, composing, breakdown.profile_per_request(LINES), 4.1)


# ------------------------------------------------------------------------------------------- statistics
def test_statistics_differences_per_model_version():
    before, after = breakdown.stats_by_version(BEFORE), breakdown.stats_by_version(AFTER)
    assert set(after) >= {("classify", "1"), ("classifier", "1"), ("classifier", "2"), ("embedder", "1")}
    times = breakdown.model_times(before[("classify", "1")], after[("classify", "1")], "classify", "1")
    assert times.requests == 1000 and times.executes == 1000
    assert times.request_ms == pytest.approx(3.9)  # (1500 x 3.6 - 500 x 3.0) / 1000
    assert times.compute_input_ms == 0.0  # absent in both: protobuf's JSON drops zeros
    prep = breakdown.model_times(before[("preprocess", "1")], after[("preprocess", "1")], "preprocess", "1")
    assert prep.label == "preprocess v1"
    assert (prep.queue_ms, prep.compute_infer_ms) == (pytest.approx(0.05), pytest.approx(1.6))
    assert breakdown.model_times(before[("classifier", "2")], after[("classifier", "2")], "classifier", "2") is None
    assert breakdown.model_times(None, after[("embedder", "1")], "embedder", "1") is None
    fresh = breakdown.model_times(None, after[("classifier", "2")], "classifier", "2")  # no snapshot before
    assert fresh.requests == 10 and fresh.compute_infer_ms == pytest.approx(9.0)


def test_http_statistics_with_integers_read_the_same():
    http = json.loads(json.dumps(AFTER).replace('"1500"', "1500"))
    after = breakdown.stats_by_version(http)
    assert breakdown.model_times(None, after[("classify", "1")], "classify", "1").requests == 1500


def test_ensemble_steps_resolve_to_the_versions_that_served():
    before, after = breakdown.stats_by_version(BEFORE), breakdown.stats_by_version(AFTER)
    assert breakdown.composing_steps(CONFIG) == [("preprocess", "-1"), ("classifier", "-1")]
    assert breakdown.composing_steps(CONFIG["config"]) == breakdown.composing_steps(CONFIG)
    assert breakdown.composing_steps({"config": {"name": "classify_fused", "backend": "python"}}) == []
    found = breakdown.resolve(breakdown.composing_steps(CONFIG), before, after)
    assert [t.label for t in found] == ["preprocess v1", "classifier v1"]  # version 2 served none in the window
    assert [t.label for t in breakdown.resolve([("classifier", "2")], before, after)] == []
    named = breakdown.resolve([("classifier", "1"), ("classifier", "-1")], before, after)
    assert [t.label for t in named] == ["classifier v1"]  # a model named twice counts once


# ------------------------------------------------------------------------------------------- profile lines
def test_profile_lines_per_model_over_its_instances():
    (first, *_) = breakdown.parse_profile(LINES)
    assert (first.instance, first.model, first.executes_per_s) == ("preprocess_0_0", "preprocess", 90.0)
    assert breakdown.parse_profile(["profile classify_fused_0_12: 3 exec/s 6 req/s 6 img/s, batch 2.0 img, per "
                                    "execute: classify=1.00ms"])[0].model == "classify_fused"  # fmt: skip
    models = breakdown.profile_per_request(LINES)
    assert set(models) == {"preprocess", "classifier"}
    prep = models["preprocess"]
    assert (prep["instances"], prep["lines"]) == (2, 2)  # each instance's first line dropped, the idle one too
    assert prep["phases_ms"]["preprocess"] == pytest.approx(1.20)  # not the straddling 9.0
    assert breakdown.execute_ms(prep["phases_ms"]) == pytest.approx(0.07 + 1.20 + 0.08)
    assert breakdown.execute_ms(models["classifier"]["phases_ms"]) == pytest.approx(0.05 + 1.05 + 0.10)


def test_profile_per_request_weighs_executes_and_batches():
    lines = [
        "profile sink_0_0: 1 exec/s 1 req/s 1 img/s, batch 1.0 img, per execute: run=5.00ms",
        "profile sink_0_0: 100 exec/s 200 req/s 200 img/s, batch 2.0 img, per execute: run=2.00ms",
        "profile sink_0_0: 300 exec/s 300 req/s 300 img/s, batch 1.0 img, per execute: run=1.00ms",
    ]
    found = breakdown.profile_per_request(lines)["sink"]
    assert found["phases_ms"]["run"] == pytest.approx((2.0 * 100 + 1.0 * 300) / (200 + 300))
    assert found["requests_per_execute"] == pytest.approx(500 / 400)


def test_inner_rows_of_the_steps():
    rows = dict((label, ms) for label, ms, _ in breakdown.inner_rows("preprocess", PREP))
    assert rows["decode (nvImageCodec; a CPU fallback included)"] == pytest.approx(0.70)
    assert rows[breakdown.KERNELS_LABEL] == pytest.approx(0.35)
    assert rows["the rest of preprocess (checks, batching, splitting rows)"] == pytest.approx(0.15)
    assert not any("fallback" in k and "of which" in k for k in rows)  # decode_s == decode_gpu_s
    assert not any(k in rows for k in (breakdown.LAUNCH_LABEL, breakdown.WAIT_LABEL))  # no launch_s: no split
    split = breakdown.inner_rows("preprocess", {**PREP, "launch_s": 0.95})
    assert (breakdown.LAUNCH_LABEL, pytest.approx(0.25), 2) in split
    assert (breakdown.WAIT_LABEL, pytest.approx(0.10), 2) in split
    assert ("the rest of preprocess (checks, batching, splitting rows)", pytest.approx(0.15), 1) in split
    classifier = {"read": 0.12, "read_tensor": 0.05, "read_array": 0.04, "respond": 0.11, "respond_bytes": 0.06,
                  "respond_numeric": 0.03, "run": 0.66}  # fmt: skip
    read = breakdown.inner_rows("read", classifier)
    assert (breakdown.PART_LABELS["read_tensor"], 0.05, 1) in read
    assert (breakdown.PART_LABELS["read_array"], 0.04, 1) in read
    assert read[-1][0].startswith("the rest of read") and read[-1][1] == pytest.approx(0.03)
    respond = dict((label, ms) for label, ms, _ in breakdown.inner_rows("respond", classifier))
    assert respond[breakdown.PART_LABELS["respond_bytes"]] == 0.06
    assert respond["the rest of respond (grouping the outputs)"] == pytest.approx(0.02)
    assert breakdown.execute_ms(classifier) == pytest.approx(0.12 + 0.11 + 0.66)  # parts are not added again
    fallback = breakdown.inner_rows("preprocess", {**PREP, "decode_gpu_s": 0.5})
    assert ("of which the CPU fallback (decode_s - decode_gpu_s)", pytest.approx(0.2), 2) in fallback
    net = dict((label, ms) for label, ms, _ in breakdown.inner_rows("run", NET))
    assert net[breakdown.NETWORK_LABEL] == 0.90
    assert net["the rest of run (checks, batching, splitting rows)"] == pytest.approx(1.05 - 0.99)
    assert breakdown.inner_rows("read", PREP) == [] and breakdown.inner_rows("classify", {"classify": 1.0}) == []


# ------------------------------------------------------------------------------------------- the breakdown
def test_classify_breakdown_adds_up_to_the_client_p50():
    found = classify_breakdown()
    rows = found["rows"]
    by_label = {label: ms for label, ms, _ in rows}
    p50 = rows[0][1]
    assert p50 == pytest.approx(4.6)
    assert by_label["client and gRPC (client p50 - server request time)"] == pytest.approx(4.6 - 3.9)
    # level 2 under the server's request: scheduling, then each step's queue, hop and execute
    assert sum(ms for _, ms, level in rows if level == 2) == pytest.approx(3.9)
    assert sum(ms for _, ms, level in rows if level == 1) == pytest.approx(p50)
    hop = by_label["preprocess v1: Python-backend hop (compute input + output + infer - execute)"]
    assert hop == pytest.approx(0.08 + 0.06 + 1.6 - 1.35)
    assert by_label["classifier v1: execute (the instances' own phases)"] == pytest.approx(1.20)
    scheduling = 3.9 - (0.05 + 0.08 + 1.6 + 0.06) - (0.04 + 0.1 + 1.4 + 0.05)
    label = "ensemble scheduling and handoffs (request - its steps' queue and compute)"
    assert by_label[label] == pytest.approx(scheduling)
    assert found["client"]["requests"] == 401 and found["perf_analyzer_p50_ms"] == 4.1
    json.dumps(found)  # the summary keeps it


def test_a_model_that_is_not_an_ensemble_is_its_own_step():
    fused = ModelTimes("classify_fused", "1", 100, 100, 2.9, 0.03, 0.06, 2.6, 0.05)
    phases = {"read": 0.1, "preprocess": 1.3, "classify": 0.9, "respond": 0.2, "decode_s": 0.8, "total_s": 1.2}
    profiles = {"classify_fused": {"phases_ms": phases, "lines": 3, "instances": 1}}
    rows = breakdown.breakdown("classify_fused", [3.2] * 10, fused, [], profiles)["rows"]
    labels = [label for label, _, _ in rows]
    assert "Triton's request handling (request - queue - compute)" in labels
    assert labels.index("read: the requests' inputs") < labels.index("step classify") < labels.index("step preprocess")
    assert labels.index("step preprocess") < labels.index("respond: the output tensors")
    assert sum(ms for _, ms, level in rows if level == 2) == pytest.approx(2.9)
    no_profile = breakdown.breakdown("classify_fused", [3.2], fused, [], {})["rows"]
    assert no_profile[-1][0] == "classify_fused v1: compute (input + infer + output; no instance profile)"


def test_breakdown_table_and_report_section(tmp_path):
    found = classify_breakdown()
    found["clocks"] = {"gpu": "0", "samples": 25.0, "sm_mhz": 1410.0, "sm_mhz_min": 1095.0, "max_sm_mhz": 1980.0}
    table = breakdown.breakdown_table(found)
    assert "- while the timed requests ran: SM clock 1,410 MHz mean, lowest 1,095 (the GPU's top 1,980)" in table
    assert not any("SM clock" in x for x in breakdown.breakdown_table(classify_breakdown()))  # not sampled: no line
    assert table[0] == "| step | ms | % of client p50 |"
    assert table[2].startswith("| client round trip, p50 of 401") and table[2].endswith("| 4.600 | 100.0 % |")
    assert any("perf_analyzer (C++ client) at c=1: p50 4.10 ms" in line for line in table)
    assert any(line.startswith("- preprocess v1: 1000 requests") for line in table)
    log.info("example table:\n%s", "\n".join(table))
    summary = {"latency": {"default": {"classify": found}}}
    assert breakdown.breakdown_section(summary)[1] == "## Where one image's time goes at c=1"
    assert breakdown.breakdown_section({}) == [] and breakdown.breakdown_table({}) == []
    write_report([], json.loads(json.dumps(summary)), tmp_path)  # as summary.json gives it back
    text = (tmp_path / "results.md").read_text()
    assert "### `classify` (default)" in text and "Python-backend hop" in text


def test_percentile_and_empty_client():
    assert breakdown.percentile([], 0.5) == 0.0
    assert breakdown.percentile([1.0, 2.0, 3.0, 4.0, 5.0], 0.9) == 5.0
    empty = breakdown.breakdown("m", [], ModelTimes("m", "1", 1, 1, 1.0, 0, 0, 1.0, 0), [], {})
    assert empty["client"]["p50_ms"] == 0.0


KERNELS = [
    {"part": "kernels", "stage": "preprocess", "images": 1280, "wall_us_per_image": 180.0,
     "gpu_busy_us_per_image": 120.0, "sum_us_per_image": {"kernel": 100.0, "gpu_memcpy": 15.0, "gpu_memset": 1.0},
     "by_name": [{"name": "tritonprep_resize_normalize", "us_per_image": 30.0, "calls": 20, "occupancy_pct": 60.0,
                  "blocks_per_sm": 4.0},
                 {"name": "nvjpeg::idct_kernel", "us_per_image": 50.0, "calls": 20, "occupancy_pct": 40.0,
                  "blocks_per_sm": 2.0}]},
    {"part": "kernels", "stage": "network", "images": 1280, "wall_us_per_image": 70.0, "gpu_busy_us_per_image": 65.0,
     "sum_us_per_image": {"kernel": 64.0}, "by_name": [{"name": "sm90_xmma_fprop", "us_per_image": 20.0, "calls": 400,
                                                       "occupancy_pct": 12.0, "blocks_per_sm": 1.0}]},
    {"part": "overlap", "threads": 0, "network_img_s": 15000},
]  # fmt: skip


def test_kernel_table_from_gpu_time(tmp_path):
    prep = dict(engines.kernel_split(KERNELS[0]))
    assert prep["decode: nvImageCodec / nvJPEG CUDA kernels"] == 70.0
    assert prep["tritonprep kernels (resize, crop, normalize, layout)"] == 30.0
    assert prep["copies and memsets"] == 16.0 and prep["GPU busy (union of the above)"] == 120.0
    assert dict(engines.kernel_split(KERNELS[1]))["network kernels"] == 64.0
    lines = engines.kernels_section({"gpu_time_kernels": KERNELS})
    assert "| preprocess | decode: nvImageCodec / nvJPEG CUDA kernels | 70.0 |" in lines
    assert "- nvjpeg::idct_kernel: 50.00 µs, 20 calls, 40 %" in lines
    assert engines.kernels_section({}) == []
    # the phase's once(): --gpu-time FILE into the summary
    from scripts.bench.harness.phases import latency

    path = tmp_path / "gpu_time.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in KERNELS))

    class FakeRun:
        summary: dict = {}

        def save(self) -> None:
            pass

    run = FakeRun()
    latency.once(run, driver.build_parser().parse_args(["--out", str(tmp_path), "--gpu-time", str(path)]))
    assert [r["stage"] for r in run.summary["gpu_time_kernels"]] == ["preprocess", "network"]


# ------------------------------------------------------------------------------------------- options, profiling
def test_latency_phase_options():
    args = driver.parse_args(["--out", "/tmp/x", "--phase", "latency", "--skip", "servers",
                              "--latency-requests", "200"])  # fmt: skip
    assert args.phases == ["latency"] and args.latency_requests == 200 and args.gpu_time is None
    with pytest.raises(SystemExit):
        driver.parse_args(["--out", "/tmp/x", "--phase", "latency", "--skip", "servers", "--latency-requests", "0"])


def test_profile_interval_from_the_environment(monkeypatch):
    monkeypatch.delenv(profiling.INTERVAL_ENV, raising=False)
    assert profiling.PhaseTimer("x").interval_s == profiling.DEFAULT_INTERVAL_S
    for value, expected in (("2", 2.0), ("0.5", 0.5), ("0", 10.0), ("-1", 10.0), ("soon", 10.0)):
        monkeypatch.setenv(profiling.INTERVAL_ENV, value)
        assert profiling.PhaseTimer("x").interval_s == expected
    assert profiling.PhaseTimer("x", interval_s=3.0).interval_s == 3.0


def test_report_with_the_phase_beside_the_others(tmp_path):
    """results.md and results.csv with the latency phase's rows and summary among a classify run's."""
    from tests.unit.test_harness_report import mps_run

    rows, summary = mps_run()
    values = {"gpu": "0", "samples": 14.0, "sm": 92.0, "jpg": 51.0, "call": "dmon -s u", "notes": []}
    latency_row = {**gpu_profile_row("classify", 1, 1, 250, {}), "kind": "latency"}
    rows += [gpu_profile_row("classify", 8, 64, 3400, values), latency_row]
    summary = {**summary, "latency": {"mps on": {"classify": classify_breakdown()}}, "gpu_time_kernels": KERNELS}
    write_report(rows, json.loads(json.dumps(summary)), tmp_path)
    text = (tmp_path / "results.md").read_text()
    for heading in ("## Where one image's time goes at c=1", "## The GPU under load",
                    "## GPU time per image by kernel (CUPTI, one process)", "## Summary"):  # fmt: skip
        assert heading in text
    assert "| gpu_profile | classify | default | 500x375 | 8 | 64 | 3,400 |" in text
    with open(tmp_path / "results.csv") as f:
        assert "sm 92 jpg 51" in f.read()


def test_one_model_glues_client_statistics_and_log(tmp_path, monkeypatch):
    """phases.latency.one_model with a fake client and server: the statistics snapshots around the timed requests,
    the profile lines the log gained from the window's start (not before), the perf_analyzer row."""
    from types import SimpleNamespace

    from scripts.bench.harness.phases import latency
    from scripts.bench.harness.settings import DEFAULT
    from scripts.perf_sweep import Row

    log_path = tmp_path / "triton-latency.log"
    log_path.write_text(profile("preprocess_0_0", 100, **{**PREP, "preprocess": 50.0}) + "\n")  # before: not read
    snapshots = iter([breakdown.stats_by_version(BEFORE), breakdown.stats_by_version(AFTER)])

    class FakeClient:
        def __init__(self, url: str, model: str, images: list[bytes], headers: dict[str, str]) -> None:
            assert (url, model, headers) == ("127.0.0.1:8001", "classify", {"h": "k"})

        def steps(self) -> list[tuple[str, str]]:
            return breakdown.composing_steps(CONFIG)

        def keep_sending(self, seconds: float) -> None:  # the warm-up, then the tail, log lines
            with open(log_path, "a") as f:
                f.write("\n".join(LINES if log_path.stat().st_size < 1000 else LINES[5:]) + "\n")

        def statistics(self) -> dict:
            return next(snapshots)

        def send(self) -> float:
            return 4.6

        def close(self) -> None:
            pass

    monkeypatch.setattr(latency, "Client", FakeClient)
    monkeypatch.setattr(latency.time, "sleep", lambda s: None)
    pa = Row("classify", "grpc", 1, 1, 240.0, 4.1, 4.3, 4.9, 4.2, 0.1, 3.0, 0.5)
    run = SimpleNamespace(rows=[], sets={"500x375": [b"jpeg"]}, measure=lambda *a, **k: [pa])
    srv = SimpleNamespace(log_path=log_path, urls={"grpc": "127.0.0.1:8001"}, setting=DEFAULT, tag="latency",
                          server=SimpleNamespace(grpc_admin_headers={"h": "k"}))  # fmt: skip
    found = latency.one_model(run, srv, "classify", 50)
    assert found["client"]["requests"] == 50 and found["perf_analyzer_p50_ms"] == 4.1
    assert found["request"]["name"] == "classify" and [c["name"] for c in found["composing"]] == [
        "preprocess", "classifier"]  # fmt: skip
    prep = found["profiles"]["preprocess"]
    assert prep["phases_ms"]["preprocess"] == pytest.approx(1.2)  # the window's lines: later ones of each instance
    assert run.rows[0]["kind"] == "latency" and run.rows[0]["p50_ms"] == 4.1
    assert latency.LOAD_POINTS == [(8, 64), (32, 16)]
