"""The embedded-server launcher (`tritonprep serve`) as a user runs it."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tritonprep_testkit.servers import MODEL_REPOSITORY, serve_command

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
