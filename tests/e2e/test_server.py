"""The embedded-server launcher (`tritonprep serve`) as a user runs it: endpoints, a quiet log, the start-up
summary, a stop that is quick, clean and exits 0 whenever it comes, and its command line."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tritonprep_testkit.servers import CLI, MODEL_REPOSITORY, serve_command

#: a line that reports a problem: tritonserver's W/E lines, and the launcher's and Python's WARNING/ERROR
PROBLEM = re.compile(r"^[EW]\d{4} |\b(?:WARNING|ERROR)\b[:]")
#: a stop with nothing in flight takes at most this long (from the signal to the launcher's exit), plus
#: UNLOAD_S for each instance of the model with the most instances beyond its first: Triton 2.51's Python
#: backend finalizes a model's instances one after another and sleeps 1 s in each
#: (python_backend src/python_be.cc, ~ModelInstanceState: Stub()->UpdateHealth())
STOP_S, UNLOAD_S = 5.0, 1.1


def stop_bound(repository: Path = MODEL_REPOSITORY, config_name: str | None = None) -> float:
    """STOP_S, plus UNLOAD_S per extra instance of the model with the most instances in ``repository``."""
    from tritonprep.launcher.served import read_models

    counts = [sum(g.count for g in m.config.instance_group) for m in read_models(repository, config_name)]
    return STOP_S + UNLOAD_S * (max(counts, default=1) - 1)


pytestmark = pytest.mark.e2e


def listening_addresses(port: int) -> set[str]:
    """Local IPv4 addresses (IPv4-mapped IPv6 included) with a TCP socket listening on ``port``."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            addr, p = fields[1].split(":")
            if fields[3] != "0A" or int(p, 16) != port:
                continue
            if len(addr) == 32 and addr.strip("0") == "":
                found.add("0.0.0.0")  # IPv6 any-address
            elif len(addr) == 32 and not addr.startswith("0000000000000000FFFF0000"):
                found.add("ipv6:" + addr)
            else:  # IPv4, or IPv4-mapped IPv6: the last 8 hex digits, little-endian
                found.add(".".join(str(int(addr[-8:][i : i + 2], 16)) for i in (6, 4, 2, 0)))
    return found


def wait_for(proc: subprocess.Popen, needle: str, timeout: float) -> list[str]:
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            if proc.poll() is not None:
                break
            continue
        lines.append(line.rstrip())
        if needle in line:
            return lines
    raise AssertionError(f"{needle!r} not seen; output:\n" + "\n".join(lines))


def test_serve_prints_endpoints_binds_localhost_and_stops_on_sigterm():
    serve = serve_command(os.devnull)
    http, grpc, metrics = serve.http, serve.grpc, serve.metrics
    proc = subprocess.Popen(
        serve.argv,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    try:
        lines = wait_for(proc, "models ready:", 180)
        text = "\n".join(lines)
        assert f"HTTP http://127.0.0.1:{http}" in text and f"gRPC 127.0.0.1:{grpc}" in text
        assert (
            "models ready: analyze, classifier, classify, classify_fused, embed, embedder, postprocess, preprocess"
            in text
        )
        for port in (http, grpc, metrics):
            assert listening_addresses(port) == {"127.0.0.1"}, port
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        rest = proc.stderr.read()
        assert "received SIGTERM" in rest and "tritonserver stopped (exit code 0)" in rest
        for port in (http, grpc, metrics):
            assert listening_addresses(port) == set()
    finally:
        if proc.poll() is None:
            proc.kill()


def test_broken_model_repository_fails_with_the_cause(tmp_path):
    repo = tmp_path / "repo"
    shutil.copytree(MODEL_REPOSITORY / "preprocess", repo / "preprocess")
    cfg = repo / "preprocess" / "config.pbtxt"
    cfg.write_text(cfg.read_text().replace('string_value: "128,128,128"', 'string_value: "0"'))
    log_file = tmp_path / "triton.log"
    r = subprocess.run(
        serve_command(log_file, repository=repo).argv,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert r.returncode == 1
    assert "tritonserver exited with code" in r.stderr
    assert "std values must be non-zero" in r.stderr  # the model's own message, from the log tail


def problems(text: str) -> list[str]:
    """The lines of ``text`` that report a warning or an error."""
    return [line for line in text.splitlines() if PROBLEM.search(line)]


def test_a_healthy_start_and_stop_logs_no_warning_a_summary_and_stops_at_once(tmp_path):
    """The CPU server: not one warning or error line, of tritonserver's or ours, from start to stop; one
    summary block at ready; SIGTERM with nothing in flight stops it within :func:`stop_bound` with exit code 0
    for the launcher and tritonserver, and nothing left for the watchdog to kill: the drain returns at once."""
    log_file = tmp_path / "serve.log"
    proc = subprocess.Popen(serve_command(log_file).argv, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    try:
        lines = wait_for(proc, "try: ", 180)
        start = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
        stop_s = time.monotonic() - start
    finally:
        if proc.poll() is None:
            proc.kill()
    rest = proc.stderr.read()  # type: ignore[union-attr]
    bound = stop_bound()
    sys.stdout.write(f"stop with nothing in flight: {stop_s:.2f} s (bound {bound:.1f} s)\n")
    text = "\n".join(lines)
    summary = text[text.index("tritonprep: server ready in") :]
    assert "GPUs: none (every instance runs on the CPU)" in summary and "CUDA MPS: off (no GPU)" in summary
    assert "GPU memory budget: not applied (no GPU)" in summary
    assert "admission: queues as configured (no GPU: no CUDA pool between steps)" in summary
    assert re.search(r"^\s+model\s+kind\s+instances\s+runtime\s+buckets\s+GPU memory$", summary, re.M), summary
    assert re.search(r"^\s+classify\s+ensemble\s", summary, re.M), summary
    assert re.search(r"^\s+classifier\s+CPU\s+1\s+onnxruntime-cpu\s", summary, re.M), summary
    # every model reports what it loaded (tritonprep.reports): its runtime fills the column
    assert re.search(r"^\s+preprocess\s+CPU\s+1\s+cpu executor\s", summary, re.M), summary
    assert re.search(r"^\s+classify_fused\s+CPU\s+1\s+cpu executor \+ onnxruntime-cpu\s", summary, re.M), summary
    assert re.search(r"^\s+embedder\s+CPU\s+1\s+onnxruntime-cpu\s", summary, re.M), summary
    assert code == 0 and stop_s <= bound, (code, stop_s, rest)
    assert re.search(r"requests in flight finished after 0\.\d s", rest), rest
    assert re.search(r"tritonserver stopped \(exit code 0\) after [\d.]+ s; nothing left to kill", rest), rest
    log = log_file.read_text()
    assert "tritonserver pid" in log and "exited with code 0" in log
    assert problems(log) == [] and problems(text + rest) == []


def watched_log(path: Path, needle: str, proc: subprocess.Popen, timeout: float = 180) -> None:
    """Until the log file ``path`` shows ``needle``."""
    deadline = time.monotonic() + timeout
    while not (path.exists() and needle in path.read_text(errors="replace")):
        assert proc.poll() is None and time.monotonic() < deadline, f"{needle!r} not seen in {path}"
        time.sleep(0.02)


@pytest.mark.parametrize(
    "moment",
    ["tritonserver started", "tritonserver ready, the launcher still polling", "right after ready"],
)
def test_a_stop_at_any_moment_of_the_start_exits_0(tmp_path, moment):
    """SIGTERM while tritonserver loads, while the launcher still waits for it, or as it reports ready: the
    launcher exits 0 (a requested stop), and stops what it started."""
    log_file = tmp_path / "serve.log"
    proc = subprocess.Popen(serve_command(log_file).argv, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    try:
        if moment == "tritonserver started":
            watched_log(log_file, "started; its shared-memory regions", proc)
        elif moment == "tritonserver ready, the launcher still polling":
            watched_log(log_file, "Started GRPCInferenceService", proc)
        else:
            wait_for(proc, "tritonserver ready:", 180)
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    rest = proc.stderr.read()  # type: ignore[union-attr]
    assert code == 0, rest
    assert "received SIGTERM" in rest and "exited with code" in log_file.read_text()


def test_python_m_launcher_serve_runs_the_same_command():
    serve = serve_command(os.devnull)
    argv = [sys.executable, "-m", "tritonprep.launcher", *serve.argv[1:]]  # `serve` and its options
    assert argv[3] == "serve"
    proc = subprocess.Popen(argv, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    try:
        wait_for(proc, "models ready:", 180)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.mark.parametrize("command", [[str(CLI), "serve"], [sys.executable, "-m", "tritonprep.launcher", "serve"]])
def test_an_unknown_option_is_our_usage_error(command):
    r = subprocess.run([*command, "--model-repositry", "x"], capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 2, r.stderr
    assert "usage: tritonprep serve" in r.stderr and "unrecognized arguments: --model-repositry" in r.stderr
    assert "tritonserver" not in r.stderr.replace("[-- tritonserver args]", "")  # nothing was started
