"""The harness's overload phase on paper (scripts/bench/harness/phases/overload.py, overload_report.py): a sweep's
figures as rows, the report's "Overload" section and issue 38's goals. No GPU, no server."""

from __future__ import annotations

from scripts.bench.harness.overload_report import overload_goals, overload_section
from scripts.bench.harness.phases.overload import SWEEP_KEYS, rows_of, sweep_key
from scripts.bench.harness.report import report_lines


def figures(n: int, rates: list[float], p99s: list[float | None], **more: object) -> dict:
    """A sweep's figures (as Sweep.figures() gives them) at factors 1, 2, 4, 8 of a saturating concurrency 16."""
    points = []
    for k, rate, p99 in zip((1, 2, 4, 8), rates, p99s):
        points.append({"factor": k, "concurrency": 16 * k, "seconds": 10.0, "images_per_s": rate, "ok": 1000,
                       "refused": 0 if k == 1 else 500 * k, "other": {}, "samples": {}, "p50_ms": 5.0,
                       "p99_ms": p99, "log_errors": 0, "log_warnings": 0, "log_samples": [], "rss_peak_mb": 900.0,
                       "rss_peak_by_process_mb": {}, "x_peak": round(rate / rates[0], 3),
                       "p99_x": None if p99 is None else round(p99 / p99s[0], 3)})  # fmt: skip
    found = {"model": "classify", "images_per_request": n, "saturating_concurrency": 16,
             "search": {"1": 1000.0, "2": 1900.0, "4": 3500.0, "8": 5000.0, "16": 6000.0, "32": 6100.0},
             "search_log_lines": 0, "search_other": 0, "points": points, "ready_after": True,
             "answered_after": "ok", "log_after": {"errors": 0, "warnings": 0, "samples": []},
             "problems": []}  # fmt: skip
    return found | more


def run_of(*sweeps: dict, setting: str = "default") -> tuple[list[dict], dict]:
    rows, summary = [], {"overload": {}}
    for f in sweeps:
        rows += rows_of(f, {"setting": setting, "mps": "", "budget": "", "server": "overload"})
        summary["overload"][sweep_key(setting, f["images_per_request"])] = {k: f[k] for k in SWEEP_KEYS}
    return rows, summary


def test_rows_are_a_point_each():
    f = figures(8, [6000, 5950, 5900, 5800], [20.0, 30.0, 39.0, None])
    f["points"][2] |= {"other": {"wrong-answer": 1, "stub-dead": 2}, "samples": {"stub-dead": "INTERNAL ..."}}
    rows, _ = run_of(f)
    assert [(r["factor"], r["concurrency"], r["other"]) for r in rows] == [(1, 16, 0), (2, 32, 0), (4, 64, 3),
                                                                         (8, 128, 0)]  # fmt: skip
    assert rows[2]["other_by_category"] == {"wrong-answer": 1, "stub-dead": 2}
    assert rows[3]["p99_ms"] != rows[3]["p99_ms"]  # nothing answered: NaN, not 0
    assert {r["kind"] for r in rows} == {"overload"} and rows[0]["images_per_request"] == 8


def test_goals_hold_the_peak_and_the_p99_without_other_errors_or_log_lines():
    held = figures(8, [6000, 5950, 5900, 5800], [20.0, 30.0, 39.0, 40.0])
    fell = figures(32, [7000, 6900, 6000, 3000], [50.0, 90.0, 120.0, 400.0], search_other=1, search_log_lines=2)
    fell["points"][3] |= {"other": {"stub-dead": 4}, "samples": {"stub-dead": "INTERNAL stub"}, "log_warnings": 3,
                          "log_samples": ["W1126 16:00:00.000000 1 pb.py:1] slow"]}  # fmt: skip
    rows, summary = run_of(held, fell)
    goals = {g.name: g for g in overload_goals(rows, summary)}
    ok8 = "`classify` 8 img/request (default)"
    assert all(g.met for name, g in goals.items() if name.startswith(ok8))
    assert goals[f"{ok8} at 8x the saturating concurrency: img/s / 1x"].value == 0.967
    assert goals[f"{ok8} at 4x: p99 / p99 at saturation"].value == 1.95
    bad = "`classify` 32 img/request (default)"
    assert goals[f"{bad} at 4x the saturating concurrency: img/s / 1x"].met is False  # 0.857
    assert goals[f"{bad} at 2x the saturating concurrency: img/s / 1x"].met  # 0.986
    other = goals[f"{bad}: requests neither answered right nor refused for overload (every k, the search)"]
    assert other.value == 5 and other.met is False and "stub-dead" in other.detail
    lines = goals[f"{bad}: E and W lines in the server's log during the sweep"]
    assert lines.value == 5 and "W1126" in lines.detail
    assert goals[f"{bad} at 2x: p99 / p99 at saturation"].value == 1.8
    assert goals[f"{bad} at 8x: p99 / p99 at saturation"].line().startswith("- **NOT met**")
    assert len(goals) == 2 * (3 + 1 + 1 + 3)
    assert overload_goals([], {}) == []


def test_the_section_has_a_table_per_request_size():
    held = figures(8, [6000, 5950, 5900, 5800], [20.0, 30.0, 39.0, None])
    fell = figures(32, [7000, 6900, 6000, 3000], [50.0, 90.0, 120.0, 400.0],
                   problems=["8x c=128: other outcomes {'stub-dead': 4}, e.g. {}"])  # fmt: skip
    fell["points"][3] |= {"other": {"stub-dead": 4}, "log_errors": 1}
    rows, summary = run_of(held, fell)
    lines = overload_section(rows, summary)
    assert lines[1].startswith("## Overload (classify, closed loop at k x the saturating concurrency")
    assert "### 8 img/request (default): saturating concurrency 16" in lines
    assert "### 32 img/request (default): saturating concurrency 16" in lines
    assert "Search (img/s): c=1 1,000, c=2 1,900, c=4 3,500, c=8 5,000, c=16 6,000, c=32 6,100." in lines
    head = ("| k | concurrency | img/s | x peak | ok | refused | other errors | p50 ms | p99 ms | p99 x saturation "
            "| E/W log lines |")  # fmt: skip
    assert lines.count(head) == 2
    assert "| 1 | 16 | 6,000 | 1.00x | 1,000 | 0 | 0 | 5.0 | 20.0 | 1.00x | 0 E, 0 W |" in lines
    assert "| 8 | 128 | 5,800 | 0.97x | 1,000 | 4,000 | 0 | 5.0 | - | - | 0 E, 0 W |" in lines
    assert "| 8 | 128 | 3,000 | 0.43x | 1,000 | 4,000 | **4** (stub-dead 4) | 5.0 | 400.0 | 8.00x | 1 E, 0 W |" in lines
    assert "After the sweep: ready True, a request got ok." in lines
    assert "- 8x c=128: other outcomes {'stub-dead': 4}, e.g. {}" in lines
    assert "Goals (issue 38):" in lines
    assert overload_section([], {}) == []


def test_the_report_carries_the_section():
    rows, summary = run_of(figures(8, [6000, 5950, 5900, 5800], [20.0, 30.0, 39.0, 40.0]))
    md = report_lines(rows, summary)
    assert "## Overload (classify, closed loop at k x the saturating concurrency, 500x375, gRPC)" in md
    assert any(ln.startswith("| overload | classify | default | 500x375 | 8 | 128 | 5,800 |") for ln in md)


def test_gpu_counts_serve_a_host_each_and_label_their_rows(monkeypatch, tmp_path):
    """--gpu-counts 1,2: the shipped repository on GPU 0, then on GPUs 0 and 1 (a host of two servers), each swept at
    both request sizes; the second's rows and summary say "2 GPUs" in their setting, and the memory sampled is every
    server's. Without --gpu-counts (or without a GPU): one server as the launcher starts it."""
    import argparse
    from contextlib import contextmanager
    from types import SimpleNamespace

    import tritonprep.launcher.install as install
    from scripts.bench.harness.phases import overload
    from scripts.bench.harness.settings import Setting
    from tritonprep_testkit import loadgen

    served, sampled = [], []

    class FakeRun:
        work, sets, rows, summary = tmp_path, {"500x375": tmp_path}, [], {}

        @contextmanager
        def serve(self, tag, repo, setting, options=None):
            served.append((tag, options))
            parts = [SimpleNamespace(pid=1)] * max(1, len((options or {}).get("gpus", ())))
            host = SimpleNamespace(options=SimpleNamespace(grpc_url="x"), servers=parts)
            yield SimpleNamespace(tag=tag, log_path=tmp_path / "log", server=host)

        def add_rows(self, rows):
            self.rows += rows

    def fake_sweep(url, model, images, n, plan, log_path, rss):
        sampled.append(rss())
        return SimpleNamespace(figures=lambda: figures(n, [100.0, 99.0, 98.0, 97.0], [1.0, 1.5, 2.0, 2.5]))

    monkeypatch.setattr(overload, "shipped_copy", lambda dest: dest)
    monkeypatch.setattr(overload.overload_sweep, "sweep", fake_sweep)
    monkeypatch.setattr(loadgen, "rss_bytes", lambda pid: 10)  # each server's tritonserver; no stubs
    monkeypatch.setattr(loadgen, "stub_processes", lambda pid: [])
    monkeypatch.setattr(install, "gpu_count", lambda: 2)
    run = FakeRun()
    overload.served(run, argparse.Namespace(gpu_counts="1,2"), Setting())
    assert served == [("overload", {"gpus": (0,)}), ("overload-2gpus", {"gpus": (0, 1)})]
    assert sorted(run.summary["overload"]) == ["default, 2 GPUs, 32", "default, 2 GPUs, 8", "default, 32", "default, 8"]
    assert {(r["setting"], r["gpus"]) for r in run.rows} == {("default", 1), ("default, 2 GPUs", 2)}
    assert sampled == [{"tritonserver": 10}] * 2 + [{"tritonserver": 20}] * 2  # both servers' memory
    assert overload.gpu_counts(argparse.Namespace(gpu_counts=""), 4) == [1]
    assert overload.gpu_counts(argparse.Namespace(gpu_counts="1,4"), 0) == [1]  # no GPU: the CPU server, once


def test_gpu_counts_are_checked_against_the_gpus_seen():
    import pytest

    from scripts.bench.harness.settings import default_counts, parse_counts

    assert default_counts(4) == [1, 2, 4] and default_counts(6) == [1, 2, 4, 6] and default_counts(0) == []
    assert parse_counts("", 2) == [1, 2] and parse_counts("2,1", 2) == [2, 1]
    with pytest.raises(ValueError, match=r"shows 2 GPU\(s\), so \[4\] cannot be served"):
        parse_counts("1,4", 2)
