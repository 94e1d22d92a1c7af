"""The perf recipe says in one line when there is no perf_analyzer to run (none, or pip's placeholder), and how to
get one, instead of a traceback (scripts/perf_sweep.py's find_perf_analyzer)."""

from __future__ import annotations

import importlib.metadata
import logging
from pathlib import Path

import pytest

from scripts import perf_sweep
from scripts.perf_sweep import PerfAnalyzerUnavailable, find_perf_analyzer


class Placeholder:
    """What pip installs as perf-analyzer on a glibc older than 2.38: a Python package without the program."""

    version = "0.1.0"
    metadata = {"Summary": "Placeholder"}


@pytest.fixture
def no_program(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(perf_sweep.shutil, "which", lambda name: None)
    monkeypatch.setattr(perf_sweep.platform, "libc_ver", lambda: ("glibc", "2.36"))


def test_a_program_on_path_or_given_by_path_is_used(tmp_path: Path):
    program = tmp_path / "perf_analyzer"
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    assert find_perf_analyzer(str(program)) == str(program)


def test_none_at_all_says_how_to_get_it(no_program, monkeypatch):
    def absent(name: str) -> None:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(perf_sweep.importlib.metadata, "distribution", absent)
    with pytest.raises(PerfAnalyzerUnavailable) as e:
        find_perf_analyzer()
    assert str(e.value) == (
        "no perf_analyzer on PATH: use a machine with glibc >= 2.38 (pip install perf-analyzer; this one has 2.36), "
        "or NVIDIA's nvcr.io/nvidia/tritonserver:<version>-py3-sdk image, or pass --perf-analyzer PATH"
    )


def test_pips_placeholder_is_named_as_one(no_program, monkeypatch):
    monkeypatch.setattr(perf_sweep.importlib.metadata, "distribution", lambda name: Placeholder())
    with pytest.raises(PerfAnalyzerUnavailable, match="perf-analyzer 0.1.0 that pip installed here is a placeholder"):
        find_perf_analyzer()


def test_the_sweep_exits_2_with_one_line_before_reading_any_image(no_program, monkeypatch, tmp_path, caplog):
    monkeypatch.setattr(perf_sweep.importlib.metadata, "distribution", lambda name: Placeholder())
    with caplog.at_level(logging.ERROR, logger="perf_sweep"):
        assert perf_sweep.main(["--images", str(tmp_path / "absent"), "--out", str(tmp_path / "out")]) == 2
    (record,) = caplog.records
    assert "placeholder" in record.getMessage() and "py3-sdk" in record.getMessage()
    assert not (tmp_path / "out").exists()


def test_a_refused_point_leaves_perf_csv_to_the_rows_measured(monkeypatch, tmp_path):
    """A point perf_analyzer could not measure (refused for overload) writes nothing: the file's header is the rows'
    columns, whichever point came first."""
    import csv

    results = iter([None, perf_sweep.Row("classify", "grpc", 8, 16, 900.0, 1, 1, 1, 1, 0, 0, 0, "")])
    monkeypatch.setattr(perf_sweep, "run_one", lambda *args, **kwargs: next(results))
    images = [b"\xff\xd8 not really a jpeg"]
    for c in (64, 16):
        perf_sweep.sweep("classify", {"grpc": "localhost:1"}, images, ["grpc"], [8], [c], 1000, tmp_path)
        if c == 64:
            assert not (tmp_path / "perf.csv").exists()
    with open(tmp_path / "perf.csv") as f:
        rows = list(csv.DictReader(f))
    assert [(r["model"], r["concurrency"], r["images_per_s"]) for r in rows] == [("classify", "16", "900.0")]
