"""Turns at the GPU (tritonprep.triton.turns): which instances take them, and that a turn excludes the other
processes of the same model and GPU until it is released, or its holder dies however it dies."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tritonprep import reports
from tritonprep.errors import ConfigError
from tritonprep.triton.turns import LOCKS, turns_for

GPU = {"model_name": "classifier", "model_instance_kind": "GPU", "model_instance_device_id": "1"}
HOLDER = """
import sys, time
from pathlib import Path
from tritonprep.triton.turns import GpuTurns
turns = GpuTurns("classifier", 1, Path(sys.argv[1]))
with turns:
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
"""


def test_who_takes_turns(tmp_path):
    env = {reports.ENV: str(tmp_path)}
    on = turns_for(GPU, {"network_turns": "gpu"}, env)
    assert on.enabled and on.path == tmp_path / LOCKS / "classifier-gpu1.lock" and on.path.exists()
    on.close()
    assert not turns_for(GPU, {}, env).enabled  # off by default
    assert not turns_for(GPU, {"network_turns": "off"}, env).enabled
    assert not turns_for({**GPU, "model_instance_kind": "CPU"}, {"network_turns": "gpu"}, env).enabled
    assert not turns_for(GPU, {"network_turns": "gpu"}, {}).enabled  # no launcher, no report folder
    ordered = turns_for(GPU, {"network_turns": "ordered"}, env)
    assert ordered.enabled and ordered.ordered and not on.ordered
    ordered.close()
    assert not turns_for(GPU, {"network_turns": "ordered"}, {}).enabled
    with pytest.raises(ConfigError, match="network_turns: 'always' is not one of gpu, ordered, off"):
        turns_for(GPU, {"network_turns": "always"}, env)


def holder(folder: Path, seconds: float) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(folder), str(seconds)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def wait_for_turn(folder: Path) -> float:
    """Seconds this process waited for the turn of classifier on GPU 1."""
    turns = turns_for(GPU, {"network_turns": "gpu"}, {reports.ENV: str(folder)})
    t0 = time.monotonic()
    with turns:
        waited = time.monotonic() - t0
    turns.close()
    return waited


def test_a_turn_excludes_the_other_instances_until_released(tmp_path):
    proc = holder(tmp_path, 1.0)
    assert wait_for_turn(tmp_path) > 0.5  # it held the turn for about a second
    assert proc.wait(10) == 0
    assert wait_for_turn(tmp_path) < 0.5  # free again


def test_a_holder_killed_by_sigkill_releases_its_turn(tmp_path):
    proc = holder(tmp_path, 60.0)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)
    assert wait_for_turn(tmp_path) < 5.0


def test_a_lock_file_that_cannot_be_opened_means_no_turns(tmp_path, caplog):
    (tmp_path / LOCKS).write_text("a file where the folder should be")
    turns = turns_for(GPU, {"network_turns": "gpu"}, {reports.ENV: str(tmp_path)})
    assert not turns.enabled and "no turns at the GPU" in caplog.text
    with turns:  # a no-op
        pass


class FakeStream:
    ptr = 1234


def test_ordered_turns_without_cuda_events_last_the_whole_block(tmp_path, monkeypatch, caplog):
    """Where an event cannot be made (here: no CuPy), the instance logs it and takes whole turns from then on:
    ``hand_over`` does nothing and the other processes wait until the block ends."""
    import tritonprep.cuda as cuda
    from tritonprep.errors import RuntimeUnavailable

    def no_cupy():
        raise RuntimeUnavailable("CuPy is not installed")

    monkeypatch.setattr(cuda, "import_cupy", no_cupy)
    turns = turns_for(GPU, {"network_turns": "ordered"}, {reports.ENV: str(tmp_path)})
    with turns.take(FakeStream()) as hand_over:
        hand_over()  # a no-op: still held
        assert wait_in_another_process(tmp_path) is None
    assert "ordered turns failed (CuPy is not installed)" in caplog.text and not turns.ordered
    assert turns.path is not None and turns.path.read_text() == ""  # nobody waits for a stale event of this one
    with turns.take(None) as hand_over:  # no stream: a whole turn
        hand_over()
        assert wait_in_another_process(tmp_path) is None
    turns.close()
    assert wait_in_another_process(tmp_path) is not None


TRY = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
try:
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    print("free")
except BlockingIOError:
    print("held")
"""


def wait_in_another_process(folder: Path) -> str | None:
    """ "free" if another process gets the turn at once now, None while it is held."""
    out = subprocess.run(
        [sys.executable, "-c", TRY, str(folder / LOCKS / "classifier-gpu1.lock")], capture_output=True, text=True
    )
    return "free" if out.stdout.strip() == "free" else None
