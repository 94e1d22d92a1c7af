"""Ordered turns at the GPU (tritonprep.triton.turns, ``network_turns: ordered``) between two real processes:
the one that takes the turn second enqueues its work at once, and the GPU runs it only after the first one's."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from tritonprep import reports
from tritonprep.triton.turns import turns_for

GPU0 = {"model_name": "classifier", "model_instance_kind": "GPU", "model_instance_device_id": "0"}
FIRST = """
import sys, time
import numpy as np
from tritonprep.cuda import import_cupy
from tritonprep.triton.turns import turns_for
cp = import_cupy()
turns = turns_for({"model_name": "classifier", "model_instance_kind": "GPU", "model_instance_device_id": "0"},
                  {"network_turns": "ordered"}, {"TRITONPREP_REPORT_DIR": sys.argv[1]})
spin = cp.RawKernel(SPIN, "tritonprep_test_spin")
hz = cp.cuda.Device(0).attributes["ClockRate"] * 1000.0  # the SM clock, kHz -> Hz
stream = cp.cuda.Stream(non_blocking=True)
with stream:
    spin((1,), (1,), (np.int64(1000),))  # compiled and loaded before the turn
    stream.synchronize()
    with turns.take(stream) as hand_over:
        spin((1,), (1,), (np.int64(float(sys.argv[2]) * hz),))  # one launch: the GPU busy for about argv[2] s
        hand_over()
        print("handed", time.time(), flush=True)
    stream.synchronize()
print("done", time.time(), flush=True)
turns.close()
"""
#: one thread spinning on the SM clock for a number of cycles: GPU work of a known length in one launch
SPIN = r"""
extern "C" __global__ void tritonprep_test_spin(long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) {}
}
"""


def test_the_second_holder_runs_on_the_gpu_after_the_first(cp, tmp_path: Path):
    env_key = reports.ENV
    assert env_key == "TRITONPREP_REPORT_DIR", "the child script names the report folder's variable"
    turns = turns_for(GPU0, {"network_turns": "ordered"}, {env_key: str(tmp_path)})
    stream = cp.cuda.Stream(non_blocking=True)
    with stream, turns.take(stream) as hand_over:  # this process's context and event, made before the first runs
        hand_over()
        tiny = cp.arange(4, dtype=cp.float32) + 1  # its kernels compiled now, not after the wait below
        stream.synchronize()
    script = f"SPIN = {SPIN!r}\n{FIRST}"
    first = subprocess.Popen([sys.executable, "-c", script, str(tmp_path), "1.0"], stdout=subprocess.PIPE, text=True)
    assert first.stdout is not None
    word, handed = first.stdout.readline().split()
    assert word == "handed"
    with stream:
        with turns.take(stream) as hand_over:
            x = tiny + 1  # done within microseconds unless it waits for the first
            hand_over()
        mine = cp.cuda.Event(disable_timing=True)
        mine.record(stream)
        time.sleep(0.05)  # ample for a tiny kernel, even time-sliced with the first process's
        queued = not mine.done  # the first process's second of work is still running: this stream waits for it
        checked = time.time()
        stream.synchronize()
        ended = time.time()
    word, done = first.stdout.readline().split()
    assert word == "done" and first.wait(60) == 0
    turns.close()
    timeline = f"handed {0:.3f}, checked {checked - float(handed):.3f}, first done {float(done) - float(handed):.3f}"
    assert checked < float(done) - 0.1, f"the first process's work ended before the check could tell ({timeline} s)"
    assert queued, f"this process's kernel was not held back behind the first process's work ({timeline} s)"
    assert float(x.sum()) == 14.0
    assert ended >= float(done) - 0.02, f"this work ended {float(done) - ended:.3f} s before the first one's"
