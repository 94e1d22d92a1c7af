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
from tritonprep.cuda import import_cupy
from tritonprep.triton.turns import turns_for
cp = import_cupy()
turns = turns_for({"model_name": "classifier", "model_instance_kind": "GPU", "model_instance_device_id": "0"},
                  {"network_turns": "ordered"}, {"TRITONPREP_REPORT_DIR": sys.argv[1]})
stream = cp.cuda.Stream(non_blocking=True)
with stream:
    a = cp.ones((8192, 8192), cp.float32)
    (a @ a).sum()  # compiled and warm
    stream.synchronize()
    with turns.take(stream) as hand_over:
        for _ in range(int(sys.argv[2])):
            a = (a @ a) * 1e-4  # about 10-50 ms each
        hand_over()
        print("handed", time.time(), flush=True)
    stream.synchronize()
print("done", time.time(), flush=True)
turns.close()
"""


def test_the_second_holder_runs_on_the_gpu_after_the_first(cp, tmp_path: Path):
    env_key = reports.ENV
    assert env_key == "TRITONPREP_REPORT_DIR", "the child script names the report folder's variable"
    turns = turns_for(GPU0, {"network_turns": "ordered"}, {env_key: str(tmp_path)})
    stream = cp.cuda.Stream(non_blocking=True)
    with stream, turns.take(stream) as hand_over:  # this process's context and event, made before the first runs
        hand_over()
    first = subprocess.Popen([sys.executable, "-c", FIRST, str(tmp_path), "24"], stdout=subprocess.PIPE, text=True)
    assert first.stdout is not None
    word, handed = first.stdout.readline().split()
    assert word == "handed"
    with stream:
        with turns.take(stream) as hand_over:
            x = cp.arange(4, dtype=cp.float32) + 1  # tiny: done at once unless it waits for the first
            hand_over()
        mine = cp.cuda.Event(disable_timing=True)
        mine.record(stream)
        queued = not mine.done  # the first process's products are still running: this stream waits for them
        stream.synchronize()
        ended = time.time()
    word, done = first.stdout.readline().split()
    assert word == "done" and first.wait(60) == 0
    turns.close()
    assert float(done) - float(handed) > 0.05, "the first process's work was too short to tell the order"
    assert queued, "this process's tiny kernel was not held back behind the first process's work on the GPU"
    assert float(x.sum()) == 10.0
    assert ended >= float(done) - 0.02, f"this work ended {float(done) - ended:.3f} s before the first one's"
