"""A short, bounded run of the fuzzer (scripts/fuzz.py) over the decode + validation path."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

from tritonprep_testkit.servers import REPO

RUNS = 4000


@pytest.mark.skipif(importlib.util.find_spec("atheris") is None, reason="atheris has no wheel for this Python")
def test_fuzzing_finds_no_crash_and_no_hang(tmp_path):
    out = tmp_path / "fuzz.json"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "scripts.fuzz",
            "--runs",
            str(RUNS),
            "--timeout",
            "10",
            "--artifacts",
            str(tmp_path / "artifacts"),
            "--json",
            str(out),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert out.is_file(), r.stdout + r.stderr
    figures = json.loads(out.read_text())
    assert figures["crashes"] == 0, (tmp_path / "artifacts", r.stdout)
    assert figures["hangs_or_fuzzer_errors"] == 0, (tmp_path / "artifacts" / "libfuzzer.log").read_text()[-3000:]
    assert r.returncode == 0, r.stdout + r.stderr
    # libFuzzer runs the requested mutations; its count of executed units may add some of the seed corpus
    assert RUNS <= figures["inputs_tried"] <= RUNS + figures["seeds"], figures
    # the mutations reach both outcomes, and rejecting is cheap in the typical case
    assert figures["rejected"] > RUNS / 4 and figures["decoded"] > 20
    assert figures["reject_ms_p50"] < figures["decode_ms_p50_valid_photos"]
