"""No orphans: however a server ends, no process and no shared-memory region of it stays behind.

Each test starts real tritonserver processes on a small repository (``orphan_models/``: ``echo``,
which with ``TRITONPREP_TEST_HELPER=1`` starts a process of its own and with
``TRITONPREP_TEST_FINALIZE_S`` hangs in ``finalize()``, and ``chatty``, whose stub logs every
millisecond and therefore deadlocks when tritonserver dies under it, ignoring SIGTERM), ends it one
way, and checks that within ``BOUND_S`` nothing is left: no process carrying the server's region
prefix (tritonserver, stubs, the model's helper, the log filter), no watchdog, no ``/dev/shm/<prefix>*``,
and where the launcher dies, no work folder (the copy of the Python backend) and no MPS daemon or server
of that folder (on a GPU machine, where ``--mps auto`` starts one per server).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tritonprep.launcher.install import gpu_count
from tritonprep.launcher.process import EmbeddedServer
from tritonprep.launcher.supervise import stub_processes
from tritonprep_testkit.leftovers import of_server, wait_clean, work_dir_of
from tritonprep_testkit.servers import local_options, running_server, serve_command

pytestmark = pytest.mark.e2e

MODELS = Path(__file__).resolve().parent / "orphan_models"
#: every way a server ends: nothing of it is left this many seconds later
BOUND_S = 20.0
HELPER = {"TRITONPREP_TEST_HELPER": "1"}


def figure(what: str, seconds: float) -> None:
    """Print a measured time (shown with ``pytest -rP``)."""
    sys.stdout.write(f"{what}: {seconds:.2f} s\n")


def assert_running(prefix: str, helper: bool = True) -> None:
    """The server with ``prefix`` has tritonserver, two stubs (and the model's helper), its watchdog, the log
    filter of a machine without a GPU, and two regions."""
    left = of_server(prefix)
    names = sorted(n.rpartition(".")[2] for n in (p.split()[1] for p in left.processes))
    expected = ["triton_python_backend_stub", "triton_python_backend_stub", "tritonserver", "watchdog"]
    if gpu_count() == 0:
        expected = sorted([*expected, "logfilter"])
    assert [n for n in names if n != "sh"] == expected, left
    assert ("sh" in names) == helper, left
    assert len(left.regions) == 2, left


# ---------------------------------------------------------------------- EmbeddedServer.stop()
def test_stop_leaves_nothing(tmp_path):
    with running_server(tmp_path / "tritonserver.log", repository=MODELS, env=HELPER) as (server, _):
        prefix = server.prefix
        assert prefix is not None and prefix.startswith(f"tritonprep_{os.stat('/proc/self/ns/pid').st_ino}_")
        assert_running(prefix)
        start = time.monotonic()
        code = server.stop()
        figure("graceful stop(), until stop() returned", time.monotonic() - start)
    assert code == 0
    assert not of_server(prefix), of_server(prefix)  # at once: stop() returns once the watchdog has cleaned up
    log = (tmp_path / "tritonserver.log").read_text()
    assert "Signal (2) received." in log  # SIGINT: Triton's graceful stop


def test_stop_kills_a_server_that_does_not_stop_in_time(tmp_path):
    """finalize() hangs: after the grace the watchdog SIGKILLs the process group, then the stubs' regions go."""
    env = {**HELPER, "TRITONPREP_TEST_FINALIZE_S": "600"}
    with running_server(tmp_path / "tritonserver.log", repository=MODELS, env=env) as (server, _):
        prefix = server.prefix
        start = time.monotonic()
        code = server.stop(timeout_s=2)
        elapsed = time.monotonic() - start
        figure("stop(timeout_s=2) of a server whose finalize() hangs", elapsed)
    assert code == -signal.SIGKILL
    assert elapsed < 2 + BOUND_S
    assert not of_server(prefix), of_server(prefix)
    assert "SIGKILL to its process group" in (tmp_path / "tritonserver.log").read_text()


# ---------------------------------------------------------------------- tritonserver killed
def test_killed_tritonserver_leaves_nothing(tmp_path):
    """Unsupervised: the watchdog cleans up at once, before anyone calls stop()."""
    with running_server(tmp_path / "tritonserver.log", repository=MODELS, env=HELPER) as (server, _):
        prefix = server.prefix
        assert_running(prefix)
        os.kill(server.pid, signal.SIGKILL)  # type: ignore[arg-type]
        figure("tritonserver SIGKILLed, until nothing is left", wait_clean(prefix, BOUND_S))
        assert server.poll() == -signal.SIGKILL
        assert server.stop() == -signal.SIGKILL


@pytest.mark.parametrize("victim", ["tritonserver", "stub"])
def test_restarted_server_stops_as_gracefully_as_the_first(tmp_path, victim):
    """The supervisor restarts the server from its own thread after tritonserver or a stub was SIGKILLed:
    nothing of the old server is left, and the new one outlives the supervisor's thread and stops
    with SIGINT and exit code 0, like the first."""
    log = tmp_path / "tritonserver.log"
    with running_server(log, repository=MODELS, env=HELPER, supervise=True) as (server, supervisor):
        assert supervisor is not None
        old_prefix, old_pid = server.prefix, server.pid
        assert old_prefix is not None and old_pid is not None
        target = old_pid if victim == "tritonserver" else next(s.pid for s in stub_processes(old_pid))
        start = time.monotonic()
        os.kill(target, signal.SIGKILL)
        figure(
            f"{victim} SIGKILLed under the supervisor, until nothing of that server is left",
            wait_clean(old_prefix, BOUND_S),
        )
        deadline = time.monotonic() + 120
        while not any(e.kind == "ready" for e in supervisor.events) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert supervisor.restarts == 1 and any(e.kind == "ready" for e in supervisor.events), supervisor.events
        figure(f"{victim} SIGKILLed, until the new server was ready", time.monotonic() - start)
        new_prefix, new_pid = server.prefix, server.pid
        assert new_prefix not in (None, old_prefix)
        supervisor.stop()  # ends the thread that started the new server
        time.sleep(1.0)
        assert server.running and server.is_ready()  # no parent-death signal bound to that thread
        assert_running(new_prefix)  # type: ignore[arg-type]
        code = server.stop()
    assert code == 0
    assert not of_server(new_prefix) and not of_server(old_prefix)  # type: ignore[arg-type]
    text = log.read_text()
    assert f"stopping tritonserver pid {new_pid} (asked to stop)" in text
    assert text.count("Signal (2) received.") == (1 if victim == "tritonserver" else 2)


def test_a_retired_start_is_reaped_and_leaves_nothing(tmp_path):
    """stop(retire=True), a restart's stop, returns at the watchdog's "released"; the new start does not wait for
    the old watchdog's clean-up, which is reaped while the new server runs: nothing of the old start is left,
    its work folder included, and the final stop leaves nothing of either."""
    log = tmp_path / "tritonserver.log"
    with running_server(log, repository=MODELS, env=HELPER) as (server, _):
        old_prefix = server.prefix
        assert old_prefix is not None
        old_work = work_dir_of(old_prefix)
        assert server.stop(timeout_s=BOUND_S, retire=True) == 0
        server.start()
        server.wait_ready(120)
        deadline = time.monotonic() + BOUND_S
        while server.reap_retired() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert server.reap_retired() == 0  # the old watchdog finished and was reaped (no zombie)
        assert not of_server(old_prefix, old_work), of_server(old_prefix, old_work)
        new_prefix = server.prefix
        assert new_prefix not in (None, old_prefix)
        assert_running(new_prefix)  # type: ignore[arg-type]
        new_work = work_dir_of(new_prefix)  # type: ignore[arg-type]
        assert server.stop() == 0
    assert not of_server(new_prefix, new_work), of_server(new_prefix, new_work)  # type: ignore[arg-type]
    assert log.read_text().count("and its processes are gone") == 2


# ---------------------------------------------------------------------- the launcher
def serve(tmp_path: Path, *extra: str) -> tuple[subprocess.Popen[str], Path]:
    """`tritonprep serve` on the test repository, ready; returns the process and its log file."""
    log = tmp_path / "serve.log"
    proc = subprocess.Popen(
        serve_command(log, *extra, repository=MODELS).argv,
        env={**os.environ, **HELPER},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    lines = []
    while time.monotonic() < deadline:
        line = proc.stderr.readline()  # type: ignore[union-attr]
        lines.append(line)
        if "models ready:" in line:
            return proc, log
        if not line and proc.poll() is not None:
            break
    proc.kill()
    raise AssertionError("tritonprep serve did not become ready:\n" + "".join(lines))


def servers_in(log: Path) -> list[tuple[int, str]]:
    """(tritonserver pid, region prefix) of every server a log names (the watchdog's start line)."""
    found = re.findall(
        r"tritonserver pid (\d+) started; its shared-memory regions are /dev/shm/(\S+)\*", log.read_text()
    )
    return [(int(pid), prefix) for pid, prefix in found]


def test_launcher_killed_with_sigkill_leaves_nothing(tmp_path):
    """The lifeline: the watchdog sees the launcher gone and stops tritonserver gracefully."""
    proc, log = serve(tmp_path)
    try:
        [(_, prefix)] = servers_in(log)
        assert_running(prefix)
        work_dir = work_dir_of(prefix)
        assert work_dir.is_dir()
        proc.kill()
        start = time.monotonic()
        proc.wait()
        left_s = wait_clean(prefix, BOUND_S - (time.monotonic() - start), work_dir)
        figure("launcher SIGKILLed, until nothing is left", left_s)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = log.read_text()
    assert "the launcher is gone" in text and "Signal (2) received." in text


@pytest.mark.parametrize("supervise", [True, False], ids=["supervised", "no-supervise"])
def test_killed_tritonserver_then_stopped_launcher_leaves_nothing(tmp_path, supervise):
    """SIGKILL to tritonserver, then at once SIGTERM to `tritonprep serve` (which may be restarting it):
    nothing of any server it started is left."""
    proc, log = serve(tmp_path, *([] if supervise else ["--no-supervise"]))
    try:
        [(pid, _)] = servers_in(log)
        os.kill(pid, signal.SIGKILL)
        start = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=BOUND_S)
        for _, prefix in servers_in(log):
            wait_clean(prefix, BOUND_S - (time.monotonic() - start))
        figure(
            f"tritonserver SIGKILLed, launcher SIGTERMed ({'supervised' if supervise else 'unsupervised'}), "
            "until nothing is left",
            time.monotonic() - start,
        )
    finally:
        if proc.poll() is None:
            proc.kill()


def test_killed_watchdog_leaves_nothing(tmp_path):
    """tritonserver's parent-death signal (SIGTERM) stops it gracefully, and Triton removes its regions."""
    with running_server(tmp_path / "tritonserver.log", repository=MODELS) as (server, _):
        prefix = server.prefix
        assert_running(prefix, helper=False)  # type: ignore[arg-type]
        work_dir = work_dir_of(prefix)  # type: ignore[arg-type]
        server.watchdog.kill()  # type: ignore[union-attr]
        figure("watchdog SIGKILLed, until nothing is left", wait_clean(prefix, BOUND_S))  # type: ignore[arg-type]
        server.stop()  # ends the MPS daemon that the watchdog could not quit (on a GPU machine)
    assert not of_server(prefix, work_dir), of_server(prefix, work_dir)  # type: ignore[arg-type]
    assert "Signal (15) received." in (tmp_path / "tritonserver.log").read_text()


# ---------------------------------------------------------------------- pytest
INNER = """
import time
from pathlib import Path

import pytest

from tritonprep_testkit.servers import running_server


@pytest.fixture
def server():
    with running_server(Path({log!r}), repository=Path({models!r}), env={{"TRITONPREP_TEST_HELPER": "1"}}) as (s, _):
        yield s


def test_inner(server):
    Path({info!r}).write_text(server.prefix)
    assert {mode!r} != "failed", "a failed test"
    time.sleep(600)
"""

INNER_MODES = {
    "failed": [],
    "timed-out": ["--timeout", "2", "--timeout-method", "signal"],  # pytest-timeout fails the test: teardown runs
    "timed-out-thread": ["--timeout", "2", "--timeout-method", "thread"],  # pytest-timeout os._exit()s: no teardown
    "interrupted": [],  # SIGINT (Ctrl-C): KeyboardInterrupt, teardown runs
    "killed": [],  # SIGKILL: no teardown
}


def _default_sigint() -> None:
    """In the inner pytest's process, before it starts: Ctrl-C's default disposition. A suite started as a background
    job (``make test &``, ``nohup``) inherits SIGINT ignored, and a Python started with it ignored never raises
    KeyboardInterrupt: the interrupted case would then wait out its bound instead of testing the teardown."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize("mode", sorted(INNER_MODES))
def test_pytest_teardown_leaves_nothing(tmp_path, mode):
    """A test that uses a server fails, times out, is interrupted or killed: nothing of the server is left."""
    info = tmp_path / "prefix.txt"
    inner = tmp_path / "test_inner.py"
    inner.write_text(
        INNER.format(log=str(tmp_path / "tritonserver.log"), models=str(MODELS), info=str(info), mode=mode)
    )
    (tmp_path / "pytest.ini").write_text("[pytest]\ntimeout_func_only = true\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", str(inner), "-q", "-p", "no:cacheprovider", *INNER_MODES[mode]],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=_default_sigint,
    )
    try:
        deadline = time.monotonic() + 120
        while not info.exists() or not info.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0]
            time.sleep(0.05)
        prefix = info.read_text()
        work_dir = work_dir_of(prefix)
        start = time.monotonic()
        if mode == "interrupted":
            proc.send_signal(signal.SIGINT)
        elif mode == "killed":
            proc.kill()
        output = proc.communicate(timeout=BOUND_S)[0]
        wait_clean(prefix, BOUND_S - (time.monotonic() - start), work_dir)
        figure(f"pytest, test {mode}, until nothing is left", time.monotonic() - start)
    finally:
        if proc.poll() is None:
            proc.kill()
    expected = {"failed": 1, "timed-out": 1, "timed-out-thread": 1, "interrupted": 2, "killed": -signal.SIGKILL}
    assert proc.returncode == expected[mode], output


# ---------------------------------------------------------------------- debris
def test_a_new_server_starts_cleanly_next_to_debris(tmp_path):
    """A server whose watchdog and tritonserver were SIGKILLed together (a cgroup kill, an OOM kill) leaves
    its deadlocked chatty stub and that stub's region; the next start sweeps them, and leaves a live
    server's processes and regions alone."""
    with running_server(tmp_path / "live.log", repository=MODELS) as (live, _):
        live_before = of_server(live.prefix)  # type: ignore[arg-type]
        dead = EmbeddedServer(local_options(MODELS), tmp_path / "dead.log")
        dead.start()
        try:
            dead.wait_ready(120)
            dead_prefix = dead.prefix
            time.sleep(0.5)
            os.kill(dead.watchdog.pid, signal.SIGKILL)  # type: ignore[union-attr]
            os.kill(dead.pid, signal.SIGKILL)  # type: ignore[arg-type]
            time.sleep(2.0)  # healthy stubs notice and go; the chatty one (deadlocked) stays
            debris = of_server(dead_prefix)  # type: ignore[arg-type]
            sys.stdout.write(f"debris before the next start: {debris}\n")
            new = EmbeddedServer(local_options(MODELS), tmp_path / "new.log")
            new.start()  # sweeps first
            try:
                assert not of_server(dead_prefix), of_server(dead_prefix)  # type: ignore[arg-type]
                assert of_server(live.prefix).regions == live_before.regions  # type: ignore[arg-type]
                assert of_server(live.prefix).processes == live_before.processes  # type: ignore[arg-type]
                new.wait_ready(120)
                assert live.is_ready()
            finally:
                assert new.stop() == 0
        finally:
            dead.stop()
        assert live.stop() == 0
