"""The benchmark harness's report (scripts/bench/harness): the goals of issues 24 and 25 computed from rows and
server records, the settings side by side, results.md and results.csv, and what the harness reads of a server
(the watchdog's lines, instance reports, GPU memory through a fake nvidia-smi). No GPU, no server."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from scripts.bench.harness import gpu, sections, serving
from scripts.bench.harness.goals import Goal, memory_goals, mps_goals, pace_goals
from scripts.bench.harness.report import CSV_KEYS, write_report
from scripts.bench.harness.summary import summary_lines
from tests.unit.fake_smi import install_fake_smi

FAKE_SMI = """#!/bin/sh
case "$*" in
  *--query-gpu=index,memory.used*) cat "$FAKE_SMI/gpu.csv" ;;
  *--query-compute-apps=*) cat "$FAKE_SMI/apps.csv" ;;
  *) exit 2 ;;
esac
"""


def triton_row(setting: str, config: str, n: int, c: int, rate: float, p50: float = 5.0, **more: object) -> dict:
    mps = setting.split("mps ")[1].split(",")[0] if "mps " in setting else ""
    return {"kind": "triton", "config": config, "size": "500x375", "protocol": "grpc", "setting": setting,
            "mps": mps, "budget": "", "model": config, "images_per_request": n, "concurrency": c,
            "images_per_s": rate, "p50_ms": p50, "p90_ms": p50, "p99_ms": p50 * 2, "server_queue_ms": 0.1,
            "server_compute_ms": 1.0, "composing": f"preprocess: queue 0.1 ms, compute {p50 / 3:.2f} ms",
            "server": "classify", **more}  # fmt: skip


def mps_run() -> tuple[list[dict], dict]:
    rows = [
        {"kind": "classifier", "config": "onnxruntime-gpu CUDA EP, FP16 NHWC, CUDA graphs", "batch": 64,
         "latency_ms": 4.0, "images_per_s": 10_000},
        {"kind": "classifier", "config": "onnxruntime-gpu CUDA EP, FP32 NCHW", "batch": 64, "latency_ms": 8.0,
         "images_per_s": 8_000},
        triton_row("mps on", "classify", 8, 64, 9_000),
        triton_row("mps off", "classify", 8, 64, 5_000),
        triton_row("mps on", "classify", 8, 16, 9_900),  # not the c=64 point the goal names
        triton_row("mps on", "classify", 32, 8, 8_000),
        triton_row("mps on", "classify", 32, 16, 9_500),
        triton_row("mps off", "classify", 32, 16, 7_000),
        triton_row("mps on", "prep_sink", 32, 16, 27_000),
        triton_row("mps off", "prep_sink", 32, 16, 20_000),
        triton_row("mps on", "classify", 1, 1, 300, p50=3.0),
        triton_row("mps off", "classify", 1, 1, 280, p50=3.2),
    ]  # fmt: skip
    summary = {"dali_best": {"images_per_s": 20_000, "batch": 256, "threads": 8, "hw_decoder_load": 1.0},
               "decode_ceiling_best": {"images_per_s": 30_000, "config": "6 decoders"}}  # fmt: skip
    return rows, summary


def by_name(goals: list[Goal]) -> dict[str, Goal]:
    return {g.name: g for g in goals}


def run_goals(rows: list[dict], summary: dict) -> dict[str, Goal]:
    """The pace and MPS goals of a run, by name."""
    return by_name([*pace_goals(rows, summary), *mps_goals(rows, summary)])


def test_pace_and_mps_goals_are_ratios_against_their_references():
    rows, summary = mps_run()
    goals = run_goals(rows, summary)
    g = goals["classify 8 img/request c=64, mps on / mps off"]
    assert g.value == pytest.approx(1.8) and g.met
    g = goals["classify 8 img/request c=64 (mps on) / the classifier alone at batch 64"]
    assert g.value == pytest.approx(0.9) and g.met  # the best variant at b64, the c=64 point
    g = goals["classify 32 img/request (mps on, best c) / the classifier alone at batch 64"]
    assert g.value == pytest.approx(0.95) and g.met
    g = goals["prep_sink 32 img/request (mps on, best c) / DALI best"]
    assert g.value == pytest.approx(1.35) and g.met
    g = goals["prep_sink 32 img/request (mps on, best c) / the decode ceiling"]
    assert g.value == pytest.approx(0.9) and g.met
    g = goals["classify c=1 p50, mps on - mps off"]
    assert g.value == pytest.approx(-0.2) and g.met
    assert not any(name.startswith("classify") and "(mps off)" in name for name in goals)  # judged with MPS on
    g = goals["prep_sink 32 img/request (mps off, best c) / DALI best"]  # the preprocessing: in every setting
    assert g.value == pytest.approx(1.0) and g.met is False
    g = goals["classify 8 img/request c=64 (mps on) / the classifier alone at batch 64"]
    assert g.target == 0.85 and goals["prep_sink 32 img/request (mps on, best c) / the decode ceiling"].target == 0.8
    g = goals["classify c=1 p50 (mps on)"]  # 3.0 ms against 2.5
    assert g.value == 3.0 and g.met is False and "goal <= 2.50 ms" in g.line()
    assert goals["classify_fused c=1 p50 (mps on)"].met is None  # not measured in this run
    rows.append(triton_row("mps on", "classify_fused", 1, 1, 500, p50=1.9))
    assert run_goals(rows, summary)["classify_fused c=1 p50 (mps on)"].met


def test_goals_not_met_and_not_measured():
    rows, summary = mps_run()
    rows = [r for r in rows if not (r.get("setting") == "mps off" and r["images_per_request"] == 1)]
    rows.append(triton_row("mps off", "classify", 8, 64, 6_000))  # measured again: the latest counts
    goals = run_goals(rows, {})
    g = goals["classify 8 img/request c=64, mps on / mps off"]
    assert g.value == pytest.approx(1.5) and g.met is False
    assert "**NOT met**: classify 8 img/request c=64, mps on / mps off: 1.50x (goal >= 1.60x" in g.line()
    g = goals["prep_sink 32 img/request (mps on, best c) / DALI best"]
    assert g.met is None and g.line().startswith("- not measured: prep_sink 32")
    assert goals["classify c=1 p50, mps on - mps off"].met is None


def test_without_mps_settings_the_goals_judge_the_run_as_it_is():
    rows = [triton_row("default", "classify", 8, 64, 4_000)]
    rows += [{"kind": "classifier", "config": "x", "batch": 64, "latency_ms": 1.0, "images_per_s": 10_000}]
    goals = run_goals(rows, {})
    assert goals["classify 8 img/request c=64 (default) / the classifier alone at batch 64"].value == 0.4
    assert not any(" / mps off" in name for name in goals)
    assert mps_goals([], {}) == [] and pace_goals([], {}) == []


def start_record(i: int, ready_s: float | None, stop_s: float | None = 2.0, code: int | None = 0, **more) -> dict:
    record = {"tag": f"startstop-{i}", "setting": "default", "baseline_mib": 500, "ready_mib": 10_500,
              "peak_mib": 12_000, "ready_s": ready_s, "stop_s": stop_s, "exit_code": code, "killed_leftovers": 0,
              "forced_kill": False, "mps": "quit", "instances": [], "faults": []}  # fmt: skip
    if ready_s is None:
        record |= {"error": "tritonserver exited with code 1 while starting", "ready_s": None, "stop_s": None}
    return record | more


def test_memory_start_and_stop_goals():
    servers = [start_record(1, 9.0, loaded=True, peak_mib=15_000), start_record(2, 16.5, stop_s=6.0),
               start_record(3, 8.0, code=-9)]  # fmt: skip
    goals = memory_goals(servers)
    assert [(g.value, g.met) for g in goals] == [
        (10_000, True),  # at ready over the baseline, the most of three
        (14_500, False),  # under load: the loaded start's peak over 14 GiB
        (16.5, False),
        (6.0, False),
        (1, False),
    ]
    assert goals[0].line() == (
        "- **met**: default repository at ready (default, the most of 3 start(s)): 10,000 MiB (goal <= 12,288 MiB)"
    )
    assert goals[4].line().endswith("1 (goal <= 0; exit codes [0, 0, -9])")
    failed = memory_goals([start_record(1, None), start_record(2, 9.0)])
    assert failed[2].detail == "1 start(s) never ready" and failed[2].met
    assert memory_goals([{"tag": "main", "ready_s": 3.0}]) == []


def test_the_settings_side_by_side():
    rows, summary = mps_run()
    summary["servers"] = [
        {"tag": "classify", "setting": "mps on", "ready_s": 20.0, "baseline_mib": 0, "peak_mib": 9_000},
        {"tag": "classify", "setting": "mps off", "ready_s": 21.0, "baseline_mib": 0, "peak_mib": 12_000},
    ]
    lines = sections.side_by_side(rows, summary)
    table = {ln.split(" | ")[0].lstrip("| "): ln.strip("| ").split(" | ")[1:] for ln in lines if ln.startswith("| ")}
    assert table["figure"] == ["mps on", "mps off", "mps on / mps off"]
    assert table["classify, 8 img/request, c=64 (img/s)"] == ["9,000 (c=64)", "5,000 (c=64)", "1.80x"]
    assert table["classify 8/c=64 / classifier alone b64"] == ["0.90x", "0.50x", "1.80x"]
    assert table["prep_sink 32 / DALI best"] == ["1.35x", "1.00x", "1.35x"]
    assert table["classify c=1 p50"] == ["3.00 ms", "3.20 ms", "0.94x"]
    assert table["classify server: peak GPU MiB over the baseline"] == ["9,000", "12,000", "0.75x"]
    assert table["classify_fused, 8 img/request, c=64"] == ["-", "-", "-"]
    assert table["classify 8/c=64 / null_classify 8/c=64"] == ["-", "-", "-"]
    rows += [triton_row("mps on", "null_classify", 8, 64, 9_500), triton_row("mps on", "null_classify", 32, 8, 12_000),
             triton_row("mps on", "null_classify", 32, 16, 10_000)]  # fmt: skip
    table = {ln.split(" | ")[0].lstrip("| "): ln.strip("| ").split(" | ")[1:]
             for ln in sections.side_by_side(rows, summary) if ln.startswith("| ")}  # fmt: skip
    assert table["null_classify (no preprocessing work) 8/c=64 / classifier alone b64"][:2] == ["0.95x", "-"]
    assert table["classify 8/c=64 / null_classify 8/c=64"][:2] == [f"{9_000 / 9_500:.2f}x", "-"]
    assert table["null_classify 32 (best c) / classifier alone b64"][0] == "1.20x"  # c=8, its best
    assert table["classify 32 / null_classify 32 (best c each)"][0] == f"{9_500 / 12_000:.2f}x"
    assert any(ln.startswith("- classify c=1 per step (mps on): preprocess: queue 0.1 ms") for ln in lines)
    assert sections.side_by_side([triton_row("default", "classify", 8, 64, 1.0)], {}) == []  # one default setting


def test_results_md_and_csv(tmp_path, capsys):
    rows, summary = mps_run()
    summary["servers"] = [start_record(1, 9.0, loaded=True), start_record(2, 9.5)]
    summary["servers"][0]["instances"] = [
        {"model": "preprocess", "instance": "preprocess_0_0", "kind": "GPU", "device": 0, "gpu_memory_mb": 900,
         "timings": {"cuda_context": 0.8, "warmup": 1.5}},
        {"model": "preprocess", "instance": "preprocess_0_1", "kind": "GPU", "device": 0, "gpu_memory_mb": 950,
         "timings": {"cuda_context": 0.9, "warmup": 1.2}},
    ]  # fmt: skip
    summary["errors"] = ["phase classify (mps on): tritonserver not ready after 300 s"]
    write_report(rows, summary, tmp_path)
    md = (tmp_path / "results.md").read_text()
    assert md == capsys.readouterr().out
    for heading in ("## Summary (500x375 q90 JPEGs, gRPC, same run, setting: mps on)",
                    "## Server settings side by side", "## Goals", "## Start and stop of the default repository",
                    "## Servers", "## Errors"):  # fmt: skip
        assert heading in md
    assert "- default: launch to ready [9.0, 9.5] s, stop [2.0, 2.0] s, exit codes [0, 0]" in md
    assert "  - preprocess x2 (GPU:0, 1,850 MiB reported): slowest instance warmup 1.50, cuda_context 0.90 s" in md
    assert "| startstop-1 | default | quit | 9.0 | 2.0 | 0 | 0 | 10,000 | 11,500 | - | preprocess x2 |" in md
    with open(tmp_path / "results.csv") as f:
        reader = csv.DictReader(f)
        assert reader.fieldnames == CSV_KEYS
        written = list(reader)
    assert [r["setting"] for r in written[2:4]] == ["mps on", "mps off"]
    assert written[0]["setting"] == "" and written[0]["batch"] == "64"


def test_the_summary_reads_the_first_setting():
    rows = [
        triton_row("mps on", "prep_sink", 8, 64, 14_000),
        triton_row("mps off", "prep_sink", 8, 64, 15_000),
        triton_row("mps on", "null_sink", 8, 64, 28_000),
        triton_row("mps off", "null_sink", 8, 64, 20_000),
    ]
    lines = summary_lines(rows, {})  # fmt: skip
    assert (
        "- 8 image(s)/request: tritonprep 14,000 img/s (c=64), null ceiling 28,000 (c=64): **50% of the ceiling**"
        in (lines)
    )
    assert summary_lines([], {}) == []


def test_classify_against_its_stages_taking_turns():
    """prep_sink 24,000 and the network 16,000 alone: taking turns they would give 9,600; classify at 12,000 is
    1.25x that and 0.75x the network alone, the preprocessing adding 20.8 us/image to the network's 62.5."""
    rows, _ = mps_run()
    rows[0]["images_per_s"] = 16_000
    rows += [triton_row("mps on", "prep_sink", 8, 64, 24_000), triton_row("mps on", "classify", 8, 32, 12_000)]
    line = next(x for x in summary_lines(rows, {}) if "taking turns" in x)
    assert line.startswith("- classify at 8 image(s)/request: 12,000 img/s = 1.25x the bound of its stages taking ")
    assert "(9,600: prep_sink 24,000, network alone 16,000), 0.75x the network alone" in line
    assert "adds 20.8 us/image of GPU time beside the network's 62.5 (0.85x the network alone allows 11.0)" in line
    no_network = [r for r in rows if r["kind"] != "classifier"]
    assert not any("taking turns" in x for x in summary_lines(no_network, {}))  # no network alone: no line


def test_instance_counts_ranked():
    rows = []
    for label, r8, r32 in (
        ("preprocess x2", 5_000, 6_000),
        ("preprocess x4", 7_000, 7_500),
        ("preprocess x6", 7_200, 6_000),
    ):
        for n, rate in ((8, r8), (32, r32)):
            rows.append(triton_row("mps on", f"classify {label}", n, 64, rate, kind="instances", model="classify",
                                   server=f"inst-{label[-1]}"))  # fmt: skip
    # one image at c=1 measured on two of them (its throughput does not count in the ranking)
    rows.append(triton_row("mps on", "classify preprocess x4", 1, 1, 300, p50=3.36, kind="instances",
                           model="classify", server="inst-4"))  # fmt: skip
    rows.append(triton_row("mps on", "classify preprocess x2", 1, 1, 9_000, p50=2.9, kind="instances",
                           model="classify", server="inst-2"))  # fmt: skip
    # one image a request at c=16 (the network's mid-sized batches): shown beside, not ranked
    rows.append(triton_row("mps on", "classify preprocess x4", 1, 16, 2_500, p50=6.4, kind="instances",
                           model="classify", server="inst-4"))  # fmt: skip
    servers = [{"tag": "inst-4", "setting": "mps on", "baseline_mib": 100, "peak_mib": 9_100, "ready_s": 12.64},
               {"tag": "inst-4", "setting": "mps off", "peak_mib": 1}]  # fmt: skip
    lines = sections.instances_ranking(rows, servers)
    assert lines[3:] == [
        "- classify (mps on), best first:",
        "  - classify preprocess x4: 7,000 img/s at 8, 7,500 at 32, 1 img/request c=16 2,500 img/s, c=1 p50 3.36 ms; "
        "peak 9,000 MiB, ready in 12.6 s",
        "  - classify preprocess x6: 7,200 img/s at 8, 6,000 at 32; peak - MiB",
        "  - classify preprocess x2: 5,000 img/s at 8, 6,000 at 32, c=1 p50 2.90 ms; peak - MiB",
    ]


# ---------------------------------------------------------------------- what the harness reads of a server
def test_the_watchdogs_lines():
    log = (
        "10:00:01 tritonprep watchdog 12: stopping tritonserver pid 13 (stop requested): SIGINT, SIGKILL after 20 s\n"
        "10:00:21 tritonprep watchdog 12: tritonserver pid 13 still runs after 20 s: SIGKILL to its process group\n"
        "10:00:22 tritonprep watchdog 12: after tritonserver pid 13: killed 2 leftover process(es) [40, 41], "
        "removed 1 shared-memory region(s)\n"
    )
    assert serving.watchdog_outcome(log) == {"killed_leftovers": 2, "forced_kill": True, "mps": ""}
    clean = (
        "10:00:00 tritonprep watchdog 12: CUDA MPS: control daemon pid 14, pipe folder /tmp/w/mps/pipe\n"
        "10:00:05 tritonprep watchdog 12: after tritonserver pid 13: killed no process, removed 1 region\n"
        "10:00:05 tritonprep watchdog 12: CUDA MPS: control daemon pid 14 quit\n"
    )
    assert serving.watchdog_outcome(clean) == {"killed_leftovers": 0, "forced_kill": False, "mps": "quit"}
    without = "10:00:00 tritonprep watchdog 12: serving without CUDA MPS: nvidia-cuda-mps-control is not installed\n"
    assert serving.watchdog_outcome(without)["mps"] == "not used: nvidia-cuda-mps-control is not installed"


def test_instance_reports_and_their_breakdown(tmp_path):
    (tmp_path / "instances").mkdir()
    (tmp_path / "instances" / "classifier_0_0.json").write_text(json.dumps(
        {"model": "classifier", "instance": "classifier_0_0", "kind": "GPU", "device": 0, "gpu_memory_mb": 2200,
         "timings": {"sessions": 3.5, "graphs": 1.25}}))  # fmt: skip
    (tmp_path / "instances" / "broken.json").write_text("{")
    (tmp_path / "instances" / "classifier_0_1.json").write_text(json.dumps(
        {"model": "classifier", "instance": "classifier_0_1", "kind": "GPU", "device": 0, "buckets": [1, 8, 32],
         "timings": {"sessions": 3.0}}))  # fmt: skip
    reports = serving.read_reports(tmp_path)
    assert sorted(r["instance"] for r in reports) == ["classifier_0_0", "classifier_0_1"]
    assert serving.instances_summary(reports) == "classifier x2 (b<=32)"
    assert serving.instances_summary([]) == ""
    reports = reports[:1] if reports[0]["instance"] == "classifier_0_0" else reports[1:]
    assert serving.read_reports(tmp_path, "faults") == [] and serving.read_reports(None) == []
    assert serving.startup_breakdown(reports) == {
        "classifier": {
            "instances": 1,
            "kinds": ["GPU:0"],
            "slowest_s": {"sessions": 3.5, "graphs": 1.25},
            "gpu_mb": 2200,
        }  # fmt: skip
    }


def test_the_report_folder_comes_from_the_servers_environment(tmp_path):
    class Named:
        report_dir = tmp_path / "named"
        pid = None

    assert serving.report_dir(Named()) == tmp_path / "named"
    base = {k: v for k, v in os.environ.items() if k != serving.REPORT_DIR_ENV}
    sleep = [sys.executable, "-c", "import time; time.sleep(60)"]
    procs = [subprocess.Popen(sleep, env={**base, serving.REPORT_DIR_ENV: str(tmp_path / "reports")}),
             subprocess.Popen(sleep, env=base)]  # fmt: skip
    try:
        with_variable = type("Server", (), {"pid": procs[0].pid})()
        without = type("Server", (), {"pid": procs[1].pid})()
        assert serving.report_dir(with_variable) == tmp_path / "reports"
        assert serving.report_dir(without) is None
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def test_server_memory_over_its_baseline_and_the_logs_tail(tmp_path):
    assert serving.server_mib({"baseline_mib": 500, "peak_mib": 2_500}, "peak_mib") == 2_000
    assert serving.server_mib({"baseline_mib": -1, "peak_mib": 2_500}, "peak_mib") is None
    assert serving.server_mib({"baseline_mib": 500}, "ready_mib") is None
    log = tmp_path / "triton.log"
    log.write_text('old "profile preprocess run 9 ms"\n')
    offset = log.stat().st_size
    with open(log, "a") as f:
        f.write('I1125 model.py] "profile preprocess run 3 ms"\nno\nprofile classify 2 ms\n')
    assert serving.profile_lines(log, offset=offset) == ["profile preprocess run 3 ms", "profile classify 2 ms"]
    assert serving.log_lines(log, "profile", 1, offset) == ['I1125 model.py] "profile preprocess run 3 ms"']


@pytest.fixture
def fake_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    install_fake_smi(tmp_path, monkeypatch, FAKE_SMI)
    return tmp_path


def test_gpu_memory_through_nvidia_smi(fake_smi):
    (fake_smi / "gpu.csv").write_text("0, 1000\n1, 500\n")
    (fake_smi / "apps.csv").write_text(f"{os.getpid()}, 700\n")
    me = Path(sys.executable).name
    assert gpu.gpu_memory_mib() == 1500
    assert gpu.gpu_memory_by_process() == {f"{me} (pid {os.getpid()})": 700}
    sampler = gpu.GpuSampler(period=60)
    sampler.take()
    (fake_smi / "gpu.csv").write_text("0, 3000\n1, 500\n")
    (fake_smi / "apps.csv").write_text(f"{os.getpid()}, 2500\n")
    sampler.take()
    (fake_smi / "apps.csv").write_text(f"{os.getpid()}, 900\n")
    sampler.take()
    assert [m for _, m in sampler.samples] == [1500, 3500, 3500]
    assert sampler.peak_mib == 3500
    assert sampler.peak_by_process == {f"{me} (pid {os.getpid()})": 2500}


def test_no_nvidia_smi_reads_as_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert gpu.read_gpu() is None and gpu.gpu_memory_mib() == -1 and gpu.gpu_memory_by_process() == {}
    assert gpu.smi_text("--query-gpu=name") == ""
    sampler = gpu.GpuSampler()
    assert sampler.take() is None and sampler.peak_mib == -1


def test_each_row_says_what_its_measurement_kept_busy():
    from scripts.bench.harness.report import rows_table

    busy = triton_row("mps on", "classify", 8, 64, 9_000, host_cpu_cores=12.34, host_cpus=16,
                      gpu_busy="sm 88 %, smutil 67 %")  # fmt: skip
    line = rows_table([busy, triton_row("mps on", "classify", 8, 16, 9_000)])
    assert line[2].endswith("; host 12.3 of 16 CPUs busy, sm 88 %, smutil 67 % |"), line[2]
    assert line[3].endswith("compute 1.67 ms |"), line[3]  # a row of a run before the fields: as it was


def test_sweep_measures_each_point_on_its_own_with_what_it_kept_busy(tmp_path, monkeypatch):
    """One perf_analyzer measurement per (protocol, images per request, concurrency), each row with the host's busy
    CPUs; the GPU sampled beside throughput points only (no nvidia-smi beside a c=1 latency)."""
    from types import SimpleNamespace

    from scripts import perf_sweep
    from scripts.bench.harness import run as run_module

    sampled: list[bool] = []

    class Util:
        def __init__(self, gpu: bool = True) -> None:
            sampled.append(gpu)

        def __enter__(self) -> Util:
            return self

        def __exit__(self, *exc: object) -> None:
            pass

        def host_cpu_cores(self) -> float:
            return 3.5

        def busy(self) -> str:
            return "sm 90 %"

    calls: list[tuple] = []

    def measure(self, srv, model, batches, conc, size, protocols, interval):  # noqa: ANN001 - Run.measure's own
        calls.append((protocols, batches, conc))
        return [perf_sweep.Row(model, protocols[0], batches[0], conc[0], 100.0, 1, 1, 1, 1, 0, 0, 0, "")]

    monkeypatch.setattr(run_module, "Utilization", Util)
    monkeypatch.setattr(run_module.Run, "measure", measure)
    run = run_module.Run.__new__(run_module.Run)
    run.out, run.rows, run.summary = tmp_path, [], {}
    srv = SimpleNamespace(setting=SimpleNamespace(row_fields=lambda: {"setting": "mps on"}), tag="classify")
    rows = run.sweep("classify", srv, "classify", [1, 8], [1, 16], protocols=("grpc", "http"))
    assert calls == [((p,), [n], [c]) for p in ("grpc", "http") for n in (1, 8) for c in (1, 16)]
    assert sampled == [c > 1 for _ in ("grpc", "http") for _ in (1, 8) for c in (1, 16)]
    assert [(r["protocol"], r["images_per_request"], r["concurrency"]) for r in rows] == [c[0] + (c[1][0], c[2][0])
                                                                                         for c in calls]  # fmt: skip
    assert all(r["host_cpu_cores"] == 3.5 and r["host_cpus"] == os.cpu_count() for r in rows)
    assert all(r["gpu_busy"] == "sm 90 %" for r in rows)
    assert json.loads((tmp_path / "rows.json").read_text()) == rows
