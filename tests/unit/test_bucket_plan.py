"""The network's bucket plan: which buckets a batch runs on, from the buckets' measured times."""

from __future__ import annotations

import itertools

import pytest

from tritonprep.classifier.bucket_plan import CHUNK_OVERHEAD_S, BucketPlan, consistent, measure

#: illustrative replay times, ms: 64 as the classifier's 15.7k img/s at batch 64 on an H100, small batches launch-bound
H100_MS = {1: 0.55, 8: 0.7, 32: 2.2, 64: 4.1}


def _plan(*sizes: int, ms: dict[int, float] = H100_MS) -> BucketPlan:
    return BucketPlan(sizes, [ms[s] / 1e3 for s in sizes])


def _best_cost(plan: BucketPlan, n: int) -> float:
    """The least time of any cover of n by the plan's buckets (brute force over chunk counts)."""
    best = float("inf")
    most = [-(-n // b) for b in plan.buckets]
    for counts in itertools.product(*(range(m + 1) for m in most)):
        if sum(c * b for c, b in zip(counts, plan.buckets)) >= n:
            best = min(best, sum(c * (t + CHUNK_OVERHEAD_S) for c, t in zip(counts, plan.seconds)))
    return best


def test_unmeasured_plans_take_the_smallest_bucket_that_holds_the_batch():
    plan = BucketPlan((1, 8, 32, 64))
    assert [plan.chunks(n) for n in (1, 2, 8, 9, 33, 64)] == [[1], [8], [8], [32], [64], [64]]
    assert plan.chunks(150) == [64, 64, 32] and plan.chunks(0) == []
    assert "not measured" in plan.describe()


def test_small_batches_run_as_small_chunks_rather_than_one_padded_large_one():
    plan = _plan(8, 64)
    assert plan.chunks(1) == [8] and plan.chunks(8) == [8]
    assert plan.chunks(16) == [8, 8]  # 2 x 0.7 ms, not 4.1 ms with 48 empty rows
    assert plan.chunks(60) == [64] and plan.chunks(64) == [64]
    assert plan.chunks(72) == [64, 8] and plan.chunks(200) == [64, 64, 64, 8]
    assert "8: 0.70 ms, 64: 4.10 ms" == plan.describe()


@pytest.mark.parametrize("sizes", [(8, 64), (1, 8, 32, 64), (4, 16, 64), (64,)])
def test_every_batch_size_gets_a_cover_of_least_time(sizes):
    ms = {1: 0.55, 4: 0.6, 8: 0.7, 16: 1.2, 32: 2.2, 64: 4.1}
    plan = _plan(*sizes, ms=ms)
    for n in range(1, 2 * plan.largest + 1):
        chunks = plan.chunks(n)
        assert sum(chunks) >= n and sum(chunks) - chunks[-1] < n, (n, chunks)  # only the last chunk is padded
        assert chunks == sorted(chunks, reverse=True)
        cost = sum(plan.seconds[plan.buckets.index(c)] + CHUNK_OVERHEAD_S for c in chunks)
        assert cost == pytest.approx(_best_cost(plan, n), abs=1e-12), (n, chunks)


def test_an_exact_bucket_is_never_split_or_padded():
    plan = _plan(1, 8, 32, 64)
    for size in plan.buckets:
        assert plan.chunks(size) == [size]


def test_a_small_bucket_timed_too_fast_cannot_split_full_batches():
    """Timed while another process held the GPU, 64 took 40 ms and 8 took 0.7: per image 8 would look five times
    cheaper, and a full batch would run as eight chunks. Per image a larger batch is never slower: 8 is raised
    to an eighth of 64, and 64 images still run as one chunk."""
    plan = BucketPlan((8, 64), [0.7e-3, 40e-3])
    assert plan.seconds == pytest.approx((5e-3, 40e-3))
    assert plan.chunks(64) == [64]


def test_times_are_made_consistent():
    assert consistent((8, 64), (2e-3, 1e-3)) == pytest.approx([2e-3, 2e-3])  # 64 never faster than 8
    assert consistent((1, 8), (0.1e-3, 4e-3)) == pytest.approx([0.5e-3, 4e-3])  # 1 at least an eighth of 8
    assert consistent((1, 8), (1e-3, 2e-3)) == pytest.approx([1e-3, 2e-3])  # already consistent: kept


def test_measure_interleaves_the_buckets_and_keeps_each_ones_least_time():
    order: list[int] = []
    assert len(measure((8, 64), order.append, rounds=3)) == 2
    assert order == [8, 64, 8, 64, 8, 64]


@pytest.mark.parametrize(("buckets", "seconds"), [((), None), ((8, 4), None), ((0, 8), None), ((8, 64), [1.0])])
def test_bad_buckets_or_times_are_refused(buckets, seconds):
    with pytest.raises(ValueError):
        BucketPlan(buckets, seconds)
    with pytest.raises(ValueError):
        BucketPlan((8,)).chunks(-1)
