"""scripts.bench.lone_image's timing, without a GPU: the statistics of a call and its steps, the idle gaps kept."""

from __future__ import annotations

import time

import pytest

from scripts.bench import lone_image


def test_measure_reports_the_calls_and_steps_and_sleeps_between_calls():
    seen: list[float] = []

    def call(data: bytes) -> dict[str, float]:
        seen.append(time.perf_counter())
        return {"preprocess": 0.001 * len(data), "network": 0.002}

    t0 = time.perf_counter()
    row = lone_image.measure(call, [b"a", b"bb"], calls=10, gap_s=0.003)
    assert len(seen) == lone_image.WARMUP_CALLS + 10
    assert time.perf_counter() - t0 >= 10 * 0.003  # a gap before each timed call
    assert min(b - a for a, b in zip(seen[-10:], seen[-9:])) >= 0.003
    assert row["steps_ms"]["preprocess"]["p50"] == pytest.approx(1.5)
    assert row["steps_ms"]["preprocess"]["p90"] == 2.0 and row["steps_ms"]["network"]["mean"] == 2.0
    assert 0 <= row["call_ms"]["p50"] <= row["call_ms"]["p90"]


def test_every_documented_path_has_a_call_and_no_other():
    for path in lone_image.PATHS:
        assert callable(lone_image.call_for(path, None, None, None, None)) and f"``{path}``" in lone_image.__doc__
    with pytest.raises(KeyError):
        lone_image.call_for("nope", None, None, None, None)


def test_profile_names_each_path_and_the_functions_its_calls_spent_time_in():
    def slow_step(data: bytes) -> None:
        time.sleep(0.001 * len(data))

    def call(data: bytes) -> dict[str, float]:
        slow_step(data)
        return {}

    text = lone_image.profile({"one_wait": call}, [b"ab"], 5, 0.0)
    assert "== one_wait: 5 calls" in text
    assert "slow_step" in text and "time.sleep" in text
