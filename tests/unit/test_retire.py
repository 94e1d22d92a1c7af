"""A retired start (tritonprep.launcher.retire): the supervisor's restart returns once the old tree is gone and
the old watchdog finishes its clean-up in the background; the launcher reaps it when it is done and, at the final
stop, waits for it, kills one that overruns and removes what it left (the work folder, its MPS daemon)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.unit.fake_mps import install, recorded
from tritonprep.launcher import mps
from tritonprep.launcher.retire import Retiring, reap_done


@pytest.fixture
def base(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A short folder for work folders (the MPS daemon's socket lies inside) and the fake MPS control on PATH."""
    bin_dir = install(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_MPS_RECORD", str(tmp_path / "mps-commands.log"))
    folder = Path(tempfile.mkdtemp(prefix="tp-rt-"))
    try:
        yield folder
    finally:
        mps.shut_down(folder)
        shutil.rmtree(folder, ignore_errors=True)


def a_watchdog(seconds: float, removes: Path | None = None) -> subprocess.Popen[bytes]:
    """A stand-in for a watchdog that cleans up for ``seconds`` and then removes ``removes``."""
    code = f"import shutil, time; time.sleep({seconds}); shutil.rmtree({str(removes)!r}, ignore_errors=True)"
    return subprocess.Popen(
        [sys.executable, "-c", code if removes is not None else f"import time; time.sleep({seconds})"]
    )


def test_a_finished_watchdog_is_reaped_and_a_busy_one_kept(base):
    done_dir, busy_dir = base / "done", base / "busy"
    done_dir.mkdir()
    busy_dir.mkdir()
    done = Retiring(a_watchdog(0.0, done_dir), done_dir, None)
    busy = Retiring(a_watchdog(30.0), busy_dir, None)
    try:
        done.watchdog.wait(10)
        left = reap_done([done, busy])
        assert left == [busy] and not done_dir.exists() and busy_dir.exists()
        assert done.watchdog.returncode == 0  # reaped: no zombie
    finally:
        busy.watchdog.kill()
        busy.watchdog.wait()


def test_the_final_stop_kills_an_overrunning_watchdog_and_ends_the_daemon_it_left(base):
    work = base / "w"
    daemon = mps.MpsDaemon(work, os.environ)
    daemon.start()
    orphan = daemon.process
    stuck = Retiring(a_watchdog(60.0), work, None)
    t0 = time.monotonic()
    stuck.finish(timeout_s=0.5)
    assert time.monotonic() - t0 < 15
    assert stuck.watchdog.returncode is not None and stuck.watchdog.returncode < 0  # SIGKILLed
    assert orphan.wait(10) == 0  # type: ignore[union-attr]  # the daemon quit when asked
    assert mps.mps_processes(base) == [] and not work.exists()
    assert recorded(Path(os.environ["FAKE_MPS_RECORD"]))[-1] == "quit"
