"""The small benchmark tools' own logic: cpu_path's points, host_wake's PM QoS hold (on a plain file) and idle
spinners, and the shape check before DALI's output is copied into the classifier's input buffer."""

import argparse
import os
import struct
import time

import pytest

from scripts.bench.classifier_bench import check_fits
from scripts.bench.cpu_path import parse_points
from scripts.bench.host_wake import CpuLatencyHold, IdleSpinners, idle_states


def test_points_are_batch_by_concurrency():
    assert parse_points("1x1, 8x2") == [(1, 1), (8, 2)]


@pytest.mark.parametrize("text", ["8", "8x", "x2", "0x1", "8x0", "8*2", "ax2"])
def test_a_malformed_point_is_refused_with_the_form_named(text):
    with pytest.raises(argparse.ArgumentTypeError, match="BATCHxCONCURRENCY"):
        parse_points(text)


def test_the_hold_writes_the_latency_as_a_32_bit_integer_and_keeps_the_file_open(tmp_path):
    target = tmp_path / "cpu_dma_latency"
    target.write_bytes(b"")
    hold = CpuLatencyHold(0, target)
    assert hold.acquire() and hold.held
    assert struct.unpack("=i", target.read_bytes()) == (0,)
    hold.release()
    assert not hold.held


def test_the_hold_says_no_where_the_file_cannot_be_opened(tmp_path):
    hold = CpuLatencyHold(0, tmp_path / "absent" / "cpu_dma_latency")
    assert not hold.acquire() and not hold.held


def test_the_spinners_run_one_per_cpu_at_sched_idle_and_stop():
    spinners = IdleSpinners()
    assert spinners.start() == len(os.sched_getaffinity(0))
    pids = [proc.pid for proc in spinners._procs]
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(os.sched_getscheduler(pid) != os.SCHED_IDLE for pid in pids):
            time.sleep(0.05)
        assert all(os.sched_getscheduler(pid) == os.SCHED_IDLE for pid in pids)
        assert sorted(next(iter(os.sched_getaffinity(pid))) for pid in pids) == sorted(os.sched_getaffinity(0))
    finally:
        spinners.stop()
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_idle_states_read_what_sysfs_says(tmp_path):
    cpuidle = tmp_path / "cpu" / "cpu0" / "cpuidle"
    for k, (name, latency) in enumerate([("POLL", "0"), ("C6", "170")]):
        (cpuidle / f"state{k}").mkdir(parents=True)
        (cpuidle / f"state{k}" / "name").write_text(name + "\n")
        (cpuidle / f"state{k}" / "latency").write_text(latency + "\n")
        (cpuidle / f"state{k}" / "disable").write_text("0\n")
    (tmp_path / "cpu" / "cpuidle").mkdir()
    (tmp_path / "cpu" / "cpuidle" / "current_driver").write_text("intel_idle\n")
    found = idle_states(cpuidle)
    assert found["driver"] == "intel_idle" and found["governor"] == ""
    assert [(s["name"], s["latency_us"]) for s in found["states"]] == [("POLL", "0"), ("C6", "170")]


def test_dali_output_must_have_the_runtime_input_buffers_shape():
    check_fits((64, 3, 224, 224), (64, 3, 224, 224))
    with pytest.raises(ValueError, match=r"DALI's output \(64, 224, 224, 3\) does not fit .* \(64, 3, 224, 224\)"):
        check_fits((64, 224, 224, 3), (64, 3, 224, 224))  # stage 15's HWC: refused before any copy
