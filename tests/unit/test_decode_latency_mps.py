"""``scripts.bench.decode_latency --mps`` where no MPS daemon can start: a clear reason and exit code 2, no rows."""

from __future__ import annotations

import logging

from scripts.bench import decode_latency


def test_without_an_mps_daemon_the_bench_says_why_and_measures_nothing(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-cuda-mps-control on it
    out = tmp_path / "rows.json"
    with caplog.at_level(logging.ERROR, logger="decode_latency"):
        assert decode_latency._under_mps(["--out", str(out)], out) == 2
    assert "no MPS daemon could start" in caplog.text and "nvidia-cuda-mps-control" in caplog.text
    assert not out.exists()
