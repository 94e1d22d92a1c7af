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
    device_id = 1


class FakeEvent:
    """Stands in for tritonprep.cuda.IpcEvent (no GPU here): records what the turns ask of it."""

    def __init__(self, device: int, fail_record: bool = False) -> None:
        self.device = device
        self.handle = bytes(range(64))
        self.calls: list[tuple] = []
        self.fail_record = fail_record

    def record(self, stream_ptr):
        if self.fail_record:
            raise RuntimeError("cudaErrorInvalidResourceHandle")
        self.calls.append(("record", stream_ptr))

    def wait(self, handle, stream_ptr):
        self.calls.append(("wait", handle, stream_ptr))

    def forget(self, handle):
        self.calls.append(("forget", handle))

    def close(self):
        self.calls.append(("close",))


def ordered_turns(folder: Path, monkeypatch, event=FakeEvent):
    import tritonprep.triton.turns as turns_module

    monkeypatch.setattr(turns_module, "IpcEvent", event)
    return turns_for(GPU, {"network_turns": "ordered"}, {reports.ENV: str(folder)})


def test_an_ordered_turn_ends_when_the_work_is_enqueued_and_names_this_process_event(tmp_path, monkeypatch):
    turns = ordered_turns(tmp_path, monkeypatch)
    with turns.take(FakeStream()) as hand_over:
        assert wait_in_another_process(tmp_path) is None  # held while enqueuing
        hand_over()
        assert wait_in_another_process(tmp_path) == "free"  # handed over before the block ends
    event = turns._event
    assert event is not None and event.device == 1 and event.calls == [("record", 1234)]  # nobody to wait for
    assert turns.path.read_text() == f"{os.getpid()} {bytes(range(64)).hex()}"
    with turns.take(FakeStream()) as hand_over:  # its own last turn: its stream keeps the order already
        hand_over()
    assert event.calls == [("record", 1234), ("record", 1234)]
    turns.close()
    assert turns.path.read_text() == ""  # closed: it names no event of a process about to end
    assert event.calls[-1] == ("close",)


def test_an_ordered_turn_waits_on_the_gpu_for_a_live_last_holder_and_not_for_an_ended_one(tmp_path, monkeypatch):
    turns = ordered_turns(tmp_path, monkeypatch)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        (tmp_path / LOCKS / "classifier-gpu1.lock").write_text(f"{other.pid} {'ab' * 64}")
        with turns.take(FakeStream()) as hand_over:
            hand_over()
        assert turns._event.calls[0] == ("wait", bytes.fromhex("ab" * 64), 1234)
    finally:
        other.kill()
        other.wait(10)
    (tmp_path / LOCKS / "classifier-gpu1.lock").write_text(f"{other.pid} {'cd' * 64}")  # that process has ended
    turns._event.calls.clear()
    with turns.take(FakeStream()) as hand_over:
        assert turns.path.read_text() == ""  # forgotten before this turn's work
        hand_over()
    assert turns._event.calls == [("forget", bytes.fromhex("cd" * 64)), ("record", 1234)]
    turns.close()


def test_an_event_that_cannot_be_recorded_means_whole_turns_from_then_on(tmp_path, monkeypatch, caplog):
    turns = ordered_turns(tmp_path, monkeypatch, lambda device: FakeEvent(device, fail_record=True))
    (tmp_path / LOCKS / "classifier-gpu1.lock").write_text(f"{os.getpid()} {'ef' * 64}")  # this process's, earlier
    with turns.take(FakeStream()) as hand_over:
        hand_over()
        assert wait_in_another_process(tmp_path) is None  # still held: the turn lasts to the end of the block
    assert "no ordered turns (cannot record its event: cudaErrorInvalidResourceHandle)" in caplog.text
    assert not turns.ordered and turns.path.read_text() == ""  # nobody waits for an event of this one
    turns.close()


def test_ordered_turns_for_a_runtime_without_a_stream_are_whole_turns(tmp_path, monkeypatch, caplog):
    turns = ordered_turns(tmp_path, monkeypatch)
    (tmp_path / LOCKS / "classifier-gpu1.lock").write_text(f"1 {'ab' * 64}")  # another process's: left alone
    with turns.take(None) as hand_over:
        hand_over()
        assert wait_in_another_process(tmp_path) is None
    assert "its runtime has no CUDA stream to order" in caplog.text and not turns.ordered
    assert turns.path.read_text() == f"1 {'ab' * 64}"
    turns.close()


def test_ordered_turns_without_cuda_events_last_the_whole_block(tmp_path, monkeypatch, caplog):
    """Where an event cannot be made (here: no CuPy), the instance logs it and takes whole turns from then on:
    ``hand_over`` does nothing and the other processes wait until the block ends."""
    import tritonprep.cuda as cuda
    from tritonprep.errors import RuntimeUnavailable

    def no_cupy():
        raise RuntimeUnavailable("CuPy is not installed")

    monkeypatch.setattr(cuda, "import_cupy", no_cupy)
    turns = turns_for(GPU, {"network_turns": "ordered"}, {reports.ENV: str(tmp_path)})
    (tmp_path / LOCKS / "classifier-gpu1.lock").write_text(f"{os.getpid()} {'ab' * 64}")  # this process's, earlier
    with turns.take(FakeStream()) as hand_over:
        hand_over()  # a no-op: still held
        assert wait_in_another_process(tmp_path) is None
    assert "no ordered turns (no CUDA IPC event: CuPy is not installed)" in caplog.text and not turns.ordered
    assert turns.path is not None and turns.path.read_text() == ""  # nobody waits for an event of this one
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
