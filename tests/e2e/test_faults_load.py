"""Overload and a short soak against real tritonserver processes (bounded in count and time;
the full runs are `python -m scripts.overload` and `python -m scripts.soak`)."""

from __future__ import annotations

import pytest

from tritonprep_testkit import overload, soak

pytestmark = pytest.mark.e2e


def test_ten_times_overload_is_rejected_fast_and_memory_levels_off():
    figures = overload.run(
        overload.settings(
            model="classify",
            factor=10.0,
            seconds=4.0,
            rounds=3,
            clients=4,
            capacity_seconds=3.0,
            timeout=30.0,
            senders=1,
        )
    )
    assert figures["capacity_req_per_s"] > 5
    for r in figures["rounds"]:
        assert r["unanswered"] == 0, r  # every request got an answer before its deadline
        assert r["outcomes"].get("queue-full", 0) + r["outcomes"].get("queue-timeout", 0) > r["sent"] / 2, r
        assert r["outcomes"].get("ok", 0) > 0, r
        assert set(r["outcomes"]) <= {"ok", "queue-full", "queue-timeout"}, r
        assert r["rejection_latency_p50_s"] < 0.1, r  # rejected at the door, not after waiting
        assert r["sender_max_lag_s"] < 1.0, r  # the client kept its schedule: the figures are the server's
        assert r["served_latency_p99_s"] < 15, r  # bounded queues bound the wait
    # bounded: after the first round (the warm-up) the peak of each process levels off. The
    # classifier stub is ONNX Runtime's arena, which keeps the largest batch it ran (bounded by its
    # queue and max_batch_size, so only an absolute bound for it). Memory right after a round is
    # not compared: tritonserver's swings by ~75 MB from round to round (the allocator gives pages
    # back or not), which a leak check must not mistake for growth.
    second, third = (r["rss_peak_by_process_mb"] for r in figures["rounds"][1:])
    for process in ("tritonserver", "stub:preprocess", "stub:postprocess"):
        assert third[process] - second[process] < 40, (process, figures)
    assert third["tritonserver"] < 1000 and third["stub:classifier"] < 2500, figures
    assert figures["ready_after"] and figures["request_after_overload"] == "ok"


def test_short_soak_has_no_unexpected_answers_and_stays_live(tmp_path):
    args = soak.settings(
        requests=1500,
        max_seconds=120.0,
        warmup=300,
        window=0.3,
        clients=3,
        bad=0.25,
        deadline=0.15,
        abort=0.05,
        classify_every=10,
        kill_every=2.0,
        max_growth_mb=50.0,
        seed=6,
        progress=0,
    )
    figures = soak.soak(args, tmp_path)
    assert figures["unexpected"] == 0, figures["unexpected_samples"]
    kinds = figures["outcomes_by_kind"]
    assert kinds["good"].get("ok", 0) > 500 and kinds["bad"] == {"rejected-input": sum(kinds["bad"].values())}
    assert figures["aborted_http_requests"] > 20 and figures["killed_client_processes"] >= 2
    assert figures["killed_client_requests"] > 0
    assert figures["liveness_failures"] == 0 and figures["restarts"] == 0 and figures["ready_at_end"]
    assert figures["memory_samples"] >= 3
    # a short run cannot show a 50 MB bound reliably (the working set still settles), so only a gross leak fails here
    assert figures["rss_growth_mb"] < 150, figures
