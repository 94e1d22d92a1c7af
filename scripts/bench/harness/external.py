"""Benchmarks that run in a process of their own (no server): the DALI sweep, the in-process executor, the
classifier alone; their rows in the harness's shape."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tritonprep_testkit.servers import REPO

log = logging.getLogger("harness")

#: the DALI sweep of the main phase (scripts.bench.dali_bench, in process): 3 x 3 x 4 = 36 configurations, each a
#: fresh pipeline, 3 warm-up + 20 timed run() calls; no configuration starts after --budget-s (``--dali-args``
#: appends to these, and an option given again there wins)
DALI_CONFIGS = ["--batch", "64,128,256", "--threads", "2,4,8", "--hw-load", "0.65,0.75,0.9,1.0", "--prefetch", "1",
                "--runs", "20", "--budget-s", "150"]  # fmt: skip
#: wall-clock limit of the DALI sweep's subprocess beyond its --budget-s (s)
DALI_TIMEOUT_MARGIN_S = 180


def one_process_row(kind: str, config: str, batch: int, concurrency: int, images_per_s: float, **extra: Any) -> dict:
    """A row of a one-process benchmark (no Triton: no protocol, no latency percentiles)."""
    return {"kind": kind, "config": config, "size": "500x375", "protocol": "-", "images_per_request": batch,
            "concurrency": concurrency, "images_per_s": images_per_s, "p50_ms": 0, "p90_ms": 0, "p99_ms": 0,
            **extra}  # fmt: skip


def _temp(name: str) -> Path:
    return Path(f"/tmp/harness-{name}-{os.getpid()}-{time.monotonic_ns()}.jsonl")


def _stderr_of(e: subprocess.TimeoutExpired) -> str:
    return e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")


def run_dali(folder: Path, extra: list[str] | None = None) -> dict:
    """DALI's in-process sweep (:mod:`scripts.bench.dali_bench`) in a subprocess: its JSON ({dali_version, protocol,
    best, all}); if it crashed or overran its limit, the configurations it had finished (its ``--rows`` file) and
    an ``error``."""
    rows_file = _temp("dali")
    cmd = [sys.executable, "-m", "scripts.bench.dali_bench", "--images", str(folder), "--rows", str(rows_file),
           *DALI_CONFIGS, *(extra or [])]  # fmt: skip
    budget = [float(cmd[i + 1]) for i, c in enumerate(cmd[:-1]) if c == "--budget-s"]  # the last one given wins
    timeout = budget[-1] + DALI_TIMEOUT_MARGIN_S
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False, cwd=REPO)
        stdout, stderr, status = proc.stdout, proc.stderr, f"exit status {proc.returncode}"
    except subprocess.TimeoutExpired as e:  # the partial output comes as bytes
        stdout, stderr, status = "", _stderr_of(e), f"killed after {timeout:.0f} s"
    results = [ln for ln in stdout.splitlines() if ln.startswith("{")]
    if results:
        res = json.loads(results[-1])
    else:
        lines = rows_file.read_text().splitlines() if rows_file.is_file() else []
        salvaged = [json.loads(ln) for ln in lines if ln.startswith("{")]
        head = next((r for r in salvaged if r.get("header")), {})
        done = [r for r in salvaged if not r.get("header")]
        ok = [r for r in done if "images_per_s" in r]
        res = {
            "dali_version": head.get("dali_version", "?"),
            "protocol": head.get("protocol", {}),
            "best": max(ok, key=lambda r: r["images_per_s"]) if ok else None,
            "all": done,
            "error": f"{status}: {(stderr.strip().splitlines() or ['?'])[-1]}",
        }
        log.error("DALI sweep failed (%s): %s; %d configurations salvaged", status, stderr.strip().splitlines()[-5:],
                  len(done))  # fmt: skip
    rows_file.unlink(missing_ok=True)
    return res


def run_json_lines(cmd: list[str], timeout: int = 600, env: dict[str, str] | None = None) -> list[dict]:
    """Rows a subprocess prints or writes as JSON lines (``{out}`` in ``cmd`` is a temporary file); what it had
    written if it overran ``timeout`` (with an error logged)."""
    out = _temp("rows")
    cmd = [str(out) if c == "{out}" else c for c in cmd]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False, cwd=REPO,
                              env={**os.environ, **(env or {})})  # fmt: skip
        stdout, stderr, failed = proc.stdout, proc.stderr, proc.returncode != 0
    except subprocess.TimeoutExpired as e:
        stdout, stderr, failed = "", f"overran {timeout} s\n{_stderr_of(e)}", True
    text = out.read_text() if out.is_file() else stdout
    out.unlink(missing_ok=True)
    if failed:
        log.error("%s failed: %s", " ".join(cmd[:4]), stderr.strip().splitlines()[-6:])
    return [json.loads(line) for line in (ln.strip() for ln in text.splitlines()) if line.startswith("{")]
