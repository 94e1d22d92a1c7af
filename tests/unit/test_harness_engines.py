"""The harness's GPU samplers and their section (scripts/bench/harness/engines.py): ``nvidia-smi dmon``'s output, the
sampler over a fake nvidia-smi and its fallbacks, the SM clock sampler, the ``gpus`` phase's utilization through
the same sampler, and the report's "GPU under load" section. No GPU, no server."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from scripts.bench.harness import engines
from scripts.bench.harness.engines import EngineSampler
from tests.unit.fake_smi import install_fake_smi

log = logging.getLogger(__name__)


# ------------------------------------------------------------------------------------------- nvidia-smi dmon
#: as driver 580.159 prints it on an H100 (``--gpm-metrics 2,3,40,41``), once with the GPM columns named by id
DMON = """\
# gpu     sm    mem    enc    dec    jpg    ofa     smutil      smocc     nvjpg0     nvjpg1
# Idx      %      %      %      %      %      %      GPM:%      GPM:%      GPM:%      GPM:%
    0     10     20      0      0     30      0          -          -          -          -
    1      0      0      0      0      0      0          -          -          -          -
    0     90     40      0      0     50      0         60         20         55         45
    1      0      0      0      0      0      0          0          0          0          0
# gpu     sm    mem    enc    dec    jpg    ofa       id=2       id=3      id=40      id=41
# Idx      %      %      %      %      %      %      GPM:%      GPM:%      GPM:%      GPM:%
    0     94     42      0      0     52      0         62         22         57         47
    0     80     30      0      0     40      0         58         18         45         35
    0  short line
"""
OLD_DMON = """\
# gpu   sm   mem   enc   dec
# Idx    %     %     %     %
    0   77    33     0     0
"""


def test_dmon_output_parsed_by_its_header():
    samples = engines.parse_dmon(DMON)
    assert len(samples) == 6 and samples[0] == {"gpu": "0", "sm": 10.0, "mem": 20.0, "enc": 0.0, "dec": 0.0,
                                                  "jpg": 30.0, "ofa": 0.0}  # fmt: skip
    assert samples[2]["smutil"] == 60.0 and samples[2]["nvjpg1"] == 45.0
    assert samples[4]["smocc"] == 22.0 and samples[4]["nvjpg0"] == 57.0  # id=3, id=40
    assert engines.column_name("id=33") == "nvdec3" and engines.column_name("id=170") == "id=170"
    assert engines.parse_dmon(OLD_DMON) == [{"gpu": "0", "sm": 77.0, "mem": 33.0, "enc": 0.0, "dec": 0.0}]
    assert engines.parse_dmon("Failed to initialize NVML\n") == [] and engines.parse_dmon("") == []
    assert engines.parse_query("0, 97, 41\n1, [N/A], 0\nbad\n") == [{"gpu": "0", "sm": 97.0, "mem": 41.0},
                                                                    {"gpu": "1", "mem": 0.0}]  # fmt: skip


def test_means_of_the_busiest_gpu_without_the_edges():
    by_gpu = engines.means(engines.parse_dmon(DMON))
    gpu, values = engines.busiest(by_gpu)
    assert gpu == "0" and values["samples"] == 2.0  # 4 samples of GPU 0, the first and last dropped
    assert values["sm"] == pytest.approx(92.0) and values["jpg"] == pytest.approx(51.0)
    assert values["smutil"] == pytest.approx(61.0) and values["nvjpg0"] == pytest.approx(56.0)
    assert engines.means(engines.parse_dmon(OLD_DMON))["0"]["sm"] == 77.0  # too few to drop any
    assert engines.busiest({}) is None
    assert engines.compact(values) == "sm 92 mem 41 jpg 51 dec 0 smocc 21 smutil 61 nvjpg 56/46"


FAKE_SMI = """#!/bin/sh
case "$*" in
  *--gpm-metrics\\ 2,3,4*) echo "GPM metric 46 is not supported"; exit 3 ;;
  *dmon*) cat "$FAKE_SMI/dmon.txt"; sleep 0.2 ;;
  *) exit 2 ;;
esac
"""


@pytest.fixture
def fake_dmon(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    install_fake_smi(tmp_path, monkeypatch, FAKE_SMI)
    monkeypatch.setattr(EngineSampler, "working", 0)
    (tmp_path / "dmon.txt").write_text(DMON)
    return tmp_path


def test_sampler_falls_back_to_fewer_metrics(fake_dmon):
    import time

    with EngineSampler() as sampler:
        deadline = time.monotonic() + 10
        while len(sampler.samples) < 12 and time.monotonic() < deadline:
            time.sleep(0.05)
    found = sampler.result()
    assert found["gpu"] == "0" and 50 < found["sm"] < 95 and "smutil" in found
    assert found["call"] == "dmon -s u -d 1 -c 6 --gpm-metrics 2,3"
    assert found["notes"] and "not supported" in found["notes"][0]
    assert EngineSampler.working == 1  # later samplers start with the call that worked


FAKE_CLOCKS_SMI = """#!/bin/sh
case "$*" in
  *clocks.sm*) cat "$FAKE_SMI/clocks.txt" ;;
  *) exit 2 ;;
esac
"""


def test_clocks_parsed_and_told():
    assert engines.parse_clocks("0, 1755, 1980, 140.52\n1, 345, 1980, [N/A]\nbad line\n") == [
        {"gpu": "0", "sm_mhz": 1755.0, "max_sm_mhz": 1980.0, "power_w": 140.52},
        {"gpu": "1", "sm_mhz": 345.0, "max_sm_mhz": 1980.0},
    ]
    assert engines.clocks_text({"sm_mhz": 1755.4, "sm_mhz_min": 1410.0, "max_sm_mhz": 1980.0, "power_w": 140.5}) == (
        "SM clock 1,755 MHz mean, lowest 1,410 (the GPU's top 1,980); 140 W"
    )
    assert engines.clocks_text({"sm_mhz": 1500.0}) == "SM clock 1,500 MHz mean"
    assert engines.clocks_text({}) == "" and engines.clocks_text({"notes": ["x"]}) == ""


def test_clock_sampler_reads_the_serving_gpu(tmp_path, monkeypatch):
    """Every GPU is read; the result is the one drawing the most power, with its mean and lowest SM clock."""
    import time

    install_fake_smi(tmp_path, monkeypatch, FAKE_CLOCKS_SMI)
    (tmp_path / "clocks.txt").write_text("0, 1200, 1980, 300\n1, 345, 1980, 70\n")
    with engines.ClockSampler() as sampler:
        deadline = time.monotonic() + 10
        while len(sampler.samples) < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        (tmp_path / "clocks.txt").write_text("0, 1800, 1980, 320\n1, 345, 1980, 70\n")
        while len(sampler.samples) < 8 and time.monotonic() < deadline:
            time.sleep(0.05)
    found = sampler.result()
    assert found["gpu"] == "0" and found["sm_mhz_min"] == 1200.0 and found["max_sm_mhz"] == 1980.0
    assert 1200.0 < found["sm_mhz"] < 1800.0 and 300.0 < found["power_w"] < 320.0, found
    assert found["samples"] >= 4 and found["notes"] == []


def test_clock_sampler_without_an_answer(tmp_path, monkeypatch):
    install_fake_smi(tmp_path, monkeypatch, FAKE_CLOCKS_SMI.replace('cat "$FAKE_SMI/clocks.txt"', "echo No devices"))
    with engines.ClockSampler() as sampler:
        sampler._thread.join(timeout=10)
    assert sampler.samples == [] and sampler.result() == {"notes": ["no clocks from nvidia-smi: No devices"]}
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    with engines.ClockSampler() as sampler:
        sampler._thread.join(timeout=10)
    assert "no clocks from nvidia-smi" in sampler.result()["notes"][0]


def test_gpus_phase_utilization_from_the_sampler(fake_dmon):
    """The ``gpus`` phase's per-GPU utilization is the engines sampler's ``sm`` means, every GPU in index order; every
    served row's (``busy``) is the first GPU's."""
    import time

    from scripts.bench.harness.utilization import Utilization

    with Utilization() as util:
        deadline = time.monotonic() + 10
        while len(util.sampler.samples) < 12 and time.monotonic() < deadline:
            time.sleep(0.05)
    first, second = util.means().split(" ")
    assert first.startswith("0:") and 50 < int(first[2:]) < 95 and second == "1:0", util.means()
    assert 0 <= util.host_cpu_cores() <= (os.cpu_count() or 1)
    assert util.busy().startswith(f"sm {int(first[2:])} %"), util.busy()
    assert Utilization().means() == "" and Utilization().busy() == ""  # nothing sampled


def test_sampler_without_nvidia_smi(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(EngineSampler, "working", 0)
    with EngineSampler() as sampler:
        sampler._thread.join(timeout=10)
    assert sampler.samples == [] and "no utilization" in sampler.result()["notes"][-1]


# ------------------------------------------------------------------------------------------- the report's sections
def gpu_profile_row(model: str, n: int, c: int, rate: float, values: dict) -> dict:
    return {"kind": "gpu_profile", "config": model, "size": "500x375", "setting": "default", "mps": "", "budget": "",
            "images_per_request": n, "concurrency": c, "images_per_s": rate, "p50_ms": 20.0, "p99_ms": 30.0,
            "engines": values, "gpu_util": engines.compact(values)}  # fmt: skip


def test_engines_section_beside_the_throughput():
    values = {"gpu": "0", "samples": 14.0, "sm": 92.0, "mem": 41.0, "jpg": 51.0, "dec": 0.0, "smutil": 61.0,
              "nvjpg1": 20.0, "nvjpg0": 22.0, "call": "dmon -s u -d 1 -c 6 --gpm-metrics 2,3",
              "notes": ["a note"]}  # fmt: skip
    rows = [gpu_profile_row("classify", 8, 64, 3400, values),
            gpu_profile_row("prep_sink", 32, 16, 9000, {"gpu": "0", "samples": 3.0, "sm": 50.0})]  # fmt: skip
    rows[0]["clocks"] = {"gpu": "0", "samples": 40.0, "sm_mhz": 1980.0, "power_w": 500.0}
    lines = engines.engines_section(rows)
    assert lines[1] == "## The GPU under load"
    header = next(line for line in lines if line.startswith("| model"))
    assert header.endswith("| sm % | mem % | jpg % | dec % | smutil % | nvjpg % | samples | SM MHz |")
    assert "| classify | default | 8 | 64 | 3,400 | 20.00 | 92 | 41 | 51 | 0 | 61 | 22/20 | 14 | 1980 |" in lines
    assert "| prep_sink | default | 32 | 16 | 9,000 | 20.00 | 50 | - | - | - | - | - | 3 | - |" in lines
    assert "- sampled with `nvidia-smi dmon -s u -d 1 -c 6 --gpm-metrics 2,3`" in lines and "- a note" in lines
    assert engines.engines_section([{"kind": "triton"}]) == []
    log.info("example GPU section:\n%s", "\n".join(lines))
