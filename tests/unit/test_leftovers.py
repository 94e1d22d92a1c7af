"""The GPU part of the leftovers check (tritonprep_testkit.leftovers, scripts/leftovers.py) against a fake
``nvidia-smi``, and that it skips cleanly without one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.fake_smi import install_fake_smi
from tritonprep_testkit.leftovers import GpuSnapshot, gpu_leftovers, gpu_snapshot

ROOT = Path(__file__).resolve().parents[2]
FAKE = """#!/bin/sh
case "$*" in
  *--query-gpu=*) cat "$FAKE_SMI/gpu.csv" ;;
  *--query-compute-apps=*) cat "$FAKE_SMI/apps.csv" ;;
  *) exit 2 ;;
esac
"""


@pytest.fixture
def fake_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fake nvidia-smi first on PATH; write gpu.csv and apps.csv into the returned folder."""
    install_fake_smi(tmp_path, monkeypatch, FAKE)
    return tmp_path


def no_smi_env(tmp_path: Path) -> dict[str, str]:
    """An environment whose PATH has no nvidia-smi."""
    empty = tmp_path / "empty-bin"
    empty.mkdir(exist_ok=True)
    return {**os.environ, "PATH": f"{empty}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}/usr/bin:/bin"}


def test_snapshot_reads_memory_and_cuda_processes(fake_smi):
    (fake_smi / "gpu.csv").write_text("0, 1024\n1, 2048\n")
    (fake_smi / "apps.csv").write_text("4242, 500\n4242, 12\n777, [N/A]\n")
    snap = gpu_snapshot()
    assert snap == GpuSnapshot({0: 1024, 1: 2048}, {4242: 512, 777: 0})
    assert GpuSnapshot.from_json(json.loads(json.dumps(snap.to_json()))) == snap  # type: ignore[union-attr]


def test_leftovers_against_a_baseline():
    baseline = GpuSnapshot({0: 500}, {111: 300})
    assert gpu_leftovers(baseline, GpuSnapshot({0: 540}, {111: 300})) == []  # within 64 MiB
    problems = gpu_leftovers(baseline, GpuSnapshot({0: 900}, {111: 300, 2**22 + 7: 380}))
    assert len(problems) == 2
    assert problems[0].startswith(f"process {2**22 + 7} (not visible here) holds a CUDA context (380 MiB)")
    assert problems[1] == "GPU 0: 900 MiB in use, 500 MiB at the baseline (+400 MiB)"
    assert len(gpu_leftovers(None, GpuSnapshot({0: 900}, {111: 300}))) == 1  # no baseline: any CUDA process


def test_without_nvidia_smi_the_gpu_part_is_skipped(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", no_smi_env(tmp_path)["PATH"])
    assert gpu_snapshot() is None
    out = tmp_path / "baseline.json"
    env = no_smi_env(tmp_path)
    run = [sys.executable, "-m", "scripts.leftovers"]
    r = subprocess.run([*run, "baseline", "--out", str(out)], cwd=ROOT, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert json.loads(out.read_text()) == {"gpu": None}
    r = subprocess.run(
        [*run, "check", "--baseline", str(out), "--wait", "0"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert "GPU: skipped (no nvidia-smi or no GPU)" in r.stdout, r.stdout + r.stderr
    assert r.returncode in (0, 1)  # 1 only if a tritonprep server runs here now (the e2e tests' own)


def test_check_reports_a_cuda_process_left_after_the_suite(tmp_path, fake_smi):
    (fake_smi / "gpu.csv").write_text("0, 500\n")
    (fake_smi / "apps.csv").write_text("")
    out = tmp_path / "baseline.json"
    run = [sys.executable, "-m", "scripts.leftovers"]
    subprocess.run([*run, "baseline", "--out", str(out)], cwd=ROOT, check=True, capture_output=True)
    (fake_smi / "gpu.csv").write_text("0, 1400\n")
    (fake_smi / "apps.csv").write_text(f"{os.getpid()}, 900\n")
    r = subprocess.run([*run, "check", "--baseline", str(out), "--wait", "0"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 1
    assert f"GPU leftover: process {os.getpid()} (" in r.stdout and "holds a CUDA context (900 MiB)" in r.stdout
    assert "GPU leftover: GPU 0: 1400 MiB in use, 500 MiB at the baseline (+900 MiB)" in r.stdout


INNER = """
import subprocess
from pathlib import Path

from tritonprep.launcher.proctable import start_time
from tritonprep.launcher.reaper import Owner, pid_namespace


def test_that_leaks(tmp_path):
    gone = subprocess.Popen(["sleep", "30"])
    started = start_time(gone.pid)
    gone.kill()
    gone.wait()
    region = Path("/dev/shm") / (Owner(pid_namespace(), gone.pid, started).prefix + "session-check-test")
    region.write_bytes(b"")
    stub = tmp_path / "triton_python_backend_stub"
    stub.symlink_to("/bin/sh")
    leaked = subprocess.Popen([str(stub), "-c", "sleep 60; :"])  # never stopped
    Path({out!r}).write_text(f"{{region}}\\n{{leaked.pid}}")
"""


def test_the_session_fails_if_a_server_process_or_region_outlives_it(tmp_path):
    """tests/conftest.py's session check, in a session of its own whose test leaves a (stand-in) stub
    process and a region of a dead watchdog behind: the run fails, and they are removed."""
    out = tmp_path / "leaked.txt"
    (tmp_path / "test_leak.py").write_text(INNER.format(out=str(out)))
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            str(tmp_path / "test_leak.py"),
            "-p",
            "tests.conftest",
            "-p",
            "no:cacheprovider",
        ]
        + ["--rootdir", str(tmp_path), "-c", str(tmp_path / "pytest.ini"), "-q"],
        cwd=ROOT,
        env={**os.environ, "TRITONPREP_SESSION_BOUND_S": "1"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    region, pid = out.read_text().split("\n")
    try:
        assert r.returncode == 1, r.stdout + r.stderr
        assert "outlived the test suite by 1 s (now removed)" in r.stdout, r.stdout
        assert f"'{pid} triton_python_backend_stub'" in r.stdout and Path(region).name in r.stdout
        assert not Path(region).exists()
        assert not Path(f"/proc/{pid}").exists() or Path(f"/proc/{pid}/cmdline").read_bytes() == b""
    finally:
        Path(region).unlink(missing_ok=True)
