"""The overload sweep's pure parts (tritonprep_testkit.overload_sweep, .closed_loop): the saturating concurrency's
pick, Triton's E and W log lines counted, answers checked against a reference, the figures and the problems of a
sweep. No server."""

from __future__ import annotations

import numpy as np
import pytest

from tritonprep_testkit.closed_loop import Expected, Tally, _shares, batches_of
from tritonprep_testkit.overload_sweep import (
    LogCount,
    LogWatch,
    Plan,
    Point,
    Sweep,
    count_log_lines,
    saturating_concurrency,
    still_growing,
)

LOG = """\
I1126 16:03:42.493121 3335 grpc_server.cc:2558] "Started GRPCInferenceService at 127.0.0.1:56491"
W1126 16:03:42.801993 3335 pinned_memory_manager.cc:170] "failed to allocate pinned system memory"
16:03:52.418 tritonprep watchdog 3333: stopping tritonserver pid 3335 (asked to stop): SIGINT, SIGKILL after 40 s
E1126 16:03:43.000001 3335 python_be.cc:1000] "Failed to process the request(s) for model 'preprocess_0_0'"
Error: not a glog line, a traceback's last line
  W1126 16:03:44.000000 3335 indented.cc:1] "not at the start of the line"
F1126 16:03:45.000000 3335 server.cc:1] "fatal"
Signal (2) received.
"""


def test_the_saturating_concurrency_is_the_smallest_within_5_percent_of_the_best():
    assert saturating_concurrency({1: 100, 2: 180, 4: 300, 8: 310, 16: 305}) == 4  # 300 >= 0.95 x 310
    assert saturating_concurrency({1: 100, 2: 180, 4: 290, 8: 310}) == 8  # 290 < 294.5
    assert saturating_concurrency({1: 50}) == 1
    assert saturating_concurrency({1: 100, 2: 99}) == 1
    with pytest.raises(ValueError):
        saturating_concurrency({})


def test_the_search_goes_on_while_a_doubling_adds_5_percent():
    assert still_growing({1: 100})
    assert still_growing({1: 100, 2: 105})
    assert not still_growing({1: 100, 2: 104.9})
    assert not still_growing({1: 100, 2: 200, 4: 150})  # fell: stop
    assert not still_growing({1: 100, 2: 200, 4: 209})  # against the best so far


def test_plan_validates_itself():
    assert Plan().factors == (1, 2, 4, 8)
    for bad in ({"factors": ()}, {"factors": (1, 0)}, {"seconds": 0}, {"growth": 1.5}, {"max_concurrency": 0},
                {"backoff_s": -1}, {"processes": -1}, {"warmup_s": -1}):  # fmt: skip
        with pytest.raises(ValueError):
            Plan(**bad)


def test_log_lines_are_counted_by_severity():
    found = count_log_lines(LOG)
    assert (found.errors, found.warnings) == (2, 1)  # E and F; W; not the indented one nor "Error:"
    assert [s.split()[0][0] for s in found.samples] == ["W", "E", "F"]
    assert count_log_lines(LOG, keep=1).samples == (LOG.splitlines()[1],)
    assert count_log_lines("") == LogCount()


def test_a_log_watch_counts_only_what_came_after_it_whole_lines_only(tmp_path):
    path = tmp_path / "tritonserver.log"
    path.write_text(LOG)  # before the watch: not counted
    watch = LogWatch(path)
    assert watch.take() == LogCount()
    with open(path, "a") as f:
        f.write('W1126 16:05:00.000000 3335 a.cc:1] "one"\nE1126 16:05:00.000001 3335 b.cc:2] "half')
    first = watch.take()
    assert (first.errors, first.warnings) == (0, 1)  # the unfinished line waits for its end
    with open(path, "a") as f:
        f.write(' a line"\n')
    second = watch.take()
    assert (second.errors, second.warnings) == (1, 0) and second.samples[0].endswith('"half a line"')
    assert LogWatch(None).take() == LogCount() == LogWatch(tmp_path / "absent.log").take()


def test_batches_send_every_photo():
    assert batches_of(4, 1) == ((0,), (1,), (2,), (3,))
    assert batches_of(4, 8) == ((0, 1, 2, 3, 0, 1, 2, 3),)
    assert batches_of(5, 2) == ((0, 1), (2, 3), (4, 0))
    assert {p for b in batches_of(256, 32) for p in b} == set(range(256)) and len(batches_of(256, 32)) == 8


def test_clients_are_shared_between_processes_evenly():
    assert _shares(10, 4) == [(0, 2), (2, 3), (5, 2), (7, 3)]
    assert _shares(2, 8) == [(0, 1), (1, 1)]
    assert sum(n for _, n in _shares(512, 8)) == 512


class FakeResult:
    def __init__(self, **outputs: np.ndarray) -> None:
        self.outputs = outputs

    def as_numpy(self, name: str) -> np.ndarray | None:
        return self.outputs.get(name)


def classified(*top1: int) -> FakeResult:
    ids = np.array([[c, 1, 2, 3, 4] for c in top1], np.int32)
    return FakeResult(CLASS_IDS=ids, SCORES=np.full((len(top1), 5), 0.2, np.float32),
                      LABELS=np.full((len(top1), 5), b"x", object))  # fmt: skip


def test_an_answer_is_right_when_its_shapes_and_top_1_match_the_reference():
    expected = Expected({"CLASS_IDS": (5,), "SCORES": (5,), "LABELS": (5,)}, (frozenset({285}), frozenset({967, 504})))
    assert expected.check(classified(285, 504, 285), [0, 1, 0]) == ""
    assert "top-1 class 281, the reference's [285]" in expected.check(classified(285, 967, 281), [0, 1, 0])
    assert "CLASS_IDS has shape (2, 5), expected (3" in expected.check(classified(285, 967), [0, 1, 0])
    missing = FakeResult(CLASS_IDS=np.zeros((1, 5), np.int32), SCORES=np.zeros((1, 5), np.float32))
    assert expected.check(missing, [0]) == "no output LABELS"
    pixels = Expected({"PIXELS": (3, 224, 224)})
    assert pixels.check(FakeResult(PIXELS=np.zeros((2, 3, 224, 224), np.float32)), [0, 1]) == ""
    assert "PIXELS has shape" in pixels.check(FakeResult(PIXELS=np.zeros((2, 3, 256, 256), np.float32)), [0, 1])
    any_size = Expected({"PIXELS": None})
    assert any_size.check(FakeResult(PIXELS=np.zeros((1, 3, 9, 9), np.float32)), [0]) == ""


def test_a_tally_counts_everything_and_times_only_the_window():
    tally, other = Tally(), Tally()
    window = (10.0, 20.0)
    tally.add("ok", "", 9.0, 9.5, 8, window)  # answered before the window: counted, not timed
    tally.add("ok", "", 11.0, 11.25, 8, window)
    tally.add("queue-full", "StatusCode.UNAVAILABLE Exceeds maximum queue size", 12.0, 12.001, 8, window)
    other.add("queue-full", "another message", 13.0, 13.001, 8, window)
    other.add("ok", "", 19.5, 20.5, 8, window)  # answered after the window
    tally.merge(other)
    assert tally.counts == {"ok": 3, "queue-full": 2}
    assert tally.samples == {"queue-full": "StatusCode.UNAVAILABLE Exceeds maximum queue size"}
    assert tally.latencies == [0.25] and tally.images == 8


def point(c: int, rate: float, p99: float | None = 20.0, **more: object) -> Point:
    fields = {"concurrency": c, "seconds": 10.0, "images_per_s": rate, "ok": 100, "refused": 0, "other": {},
              "samples": {}, "p50_ms": 10.0, "p99_ms": p99} | more  # fmt: skip
    return Point(**fields)  # type: ignore[arg-type]


def test_a_sweep_that_held_has_no_problems_and_its_ratios_are_to_the_1x_point():
    found = Sweep("classify", 8, 16, {8: point(8, 900), 16: point(16, 1000), 32: point(32, 1010)},
                  {1: point(16, 1000), 2: point(32, 990, 30.0, refused=50), 8: point(128, 970, None, ok=0)},
                  True, "ok")  # fmt: skip
    figures = found.figures()
    assert figures["search"] == {"8": 900, "16": 1000, "32": 1010}
    assert [(p["factor"], p["x_peak"], p["p99_x"]) for p in figures["points"]] == [
        (1, 1.0, 1.0), (2, 0.99, 1.5), (8, 0.97, None)]  # fmt: skip
    assert found.problems() == ["8x c=128: no request answered right"]


def test_every_broken_rule_is_a_problem():
    bad = point(64, 500, other={"wrong-answer": 2, "stub-dead": 1}, samples={"stub-dead": "INTERNAL stub"},
                log_errors=1, log_warnings=2, log_samples=("E1126 ...", "W1126 ..."))  # fmt: skip
    found = Sweep("classify", 8, 16, {}, {1: point(16, 1000), 4: bad}, False, "server-unavailable: gone",
                  LogCount(0, 1, ("W1126 after",)))  # fmt: skip
    problems = found.problems()
    assert problems == [
        "4x c=64: other outcomes {'wrong-answer': 2, 'stub-dead': 1}, e.g. {'stub-dead': 'INTERNAL stub'}",
        "4x c=64: 1 E and 2 W line(s) in Triton's log: ['E1126 ...', 'W1126 ...']",
        "after the sweep: E/W lines in Triton's log: ['W1126 after']",
        "after the sweep: the server is not ready",
        "after the sweep: a request got server-unavailable: gone",
    ]
    assert found.figures()["problems"] == problems
