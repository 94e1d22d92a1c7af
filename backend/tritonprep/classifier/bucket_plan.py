"""How a batch is spread over a network's batch buckets: the cover that takes the least time.

A bucket session (:mod:`.ort_cuda`) runs one fixed batch size, so a batch of ``n`` images runs as one
or more *chunks*, each on a bucket, the last one padded. Which buckets: the set that covers ``n`` in
the least total time, from each bucket's run time measured once its CUDA graph is captured. With
buckets 8 and 64 (two first runs at start instead of four), 16 images run as two chunks of 8
(~2 x 0.7 ms on an H100) rather than one of 64 padded with 48 empty rows (~4 ms), and 60 images run as
one chunk of 64.

The measured times are cleaned before they are used: a larger batch never takes less time, and never
more time per image, than a smaller one (a GPU runs a larger batch at least as efficiently). A time
taken while other processes share the GPU can otherwise make a small bucket look cheaper per image than
it is, and the plan would then split full batches into many small chunks.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

#: what a chunk costs besides its run (copying its rows in and out), seconds: near ties go to fewer chunks
CHUNK_OVERHEAD_S = 50e-6
#: replays of each bucket when its time is measured (the least is kept)
MEASURE_ROUNDS = 5


def increasing_sizes(sizes: Sequence[int]) -> bool:
    """Whether ``sizes`` are strictly increasing positive batch sizes (none at all counts as such)."""
    return sorted(set(sizes)) == list(sizes) and (not sizes or sizes[0] >= 1)


def measure(buckets: Sequence[int], run: Callable[[int], object], rounds: int = MEASURE_ROUNDS) -> list[float]:
    """Seconds one run of each bucket takes: ``run(size)`` must run bucket ``size`` and wait for it. The
    buckets take turns, ``rounds`` times, so that whatever else uses the GPU meanwhile weighs on all of
    them alike, and each keeps its least time."""
    best = [float("inf")] * len(buckets)
    for _ in range(rounds):
        for i, size in enumerate(buckets):
            t0 = time.perf_counter()
            run(size)
            best[i] = min(best[i], time.perf_counter() - t0)
    return best


def consistent(buckets: Sequence[int], seconds: Sequence[float]) -> list[float]:
    """``seconds`` made physically consistent: non-decreasing with the bucket size, and the time per image
    non-increasing (each bucket at least ``size / larger size`` of any larger bucket's time)."""
    out = [max(float(s), 1e-9) for s in seconds]
    for i in range(len(out) - 2, -1, -1):  # per image: a smaller bucket at least its share of a larger one
        out[i] = max(out[i], out[i + 1] * buckets[i] / buckets[i + 1])
    for i in range(1, len(out)):  # in total: a larger bucket at least as long as a smaller one
        out[i] = max(out[i], out[i - 1])
    return out


class BucketPlan:
    """The chunks each batch size runs as. ``seconds``: each bucket's measured run time (None: not measured; a
    batch runs on the smallest bucket that holds it, more than the largest in chunks of the largest)."""

    def __init__(self, buckets: Sequence[int], seconds: Sequence[float] | None = None) -> None:
        if not buckets or not increasing_sizes(buckets):
            raise ValueError(f"buckets must be increasing positive sizes, got {list(buckets)}")
        if seconds is not None and len(seconds) != len(buckets):
            raise ValueError(f"{len(seconds)} times for {len(buckets)} buckets")
        self.buckets = tuple(buckets)
        self.largest = self.buckets[-1]
        self.measured = seconds is not None
        #: the time of each bucket the plan uses (seconds; unmeasured: proportional to the size)
        self.seconds = tuple(consistent(self.buckets, seconds if seconds is not None else self.buckets))
        # the least time to cover m images, for m up to twice the largest bucket; above, the largest runs first
        self._limit = 2 * self.largest
        cost = [0.0] + [float("inf")] * self._limit
        first = [0] * (self._limit + 1)
        for m in range(1, self._limit + 1):
            for size, t in zip(self.buckets, self.seconds):
                c = t + CHUNK_OVERHEAD_S + cost[max(0, m - size)]
                if c < cost[m]:  # on a tie the smaller bucket (met first) stays: less padding
                    cost[m], first[m] = c, size
        self._cost, self._first = cost, first

    def chunks(self, n: int) -> list[int]:
        """The bucket sizes ``n`` images run on, largest first (their sum is at least ``n``; the last chunk
        holds the rest of the images, padded to its bucket)."""
        if n < 0:
            raise ValueError(f"a batch of {n} images")
        out: list[int] = []
        while n > (self._limit if self.measured else self.largest):
            out.append(self.largest)
            n -= self.largest
        if not self.measured:
            return out + ([next(b for b in self.buckets if b >= n)] if n > 0 else [])
        while n > 0:
            out.append(self._first[n])
            n -= self._first[n]
        return sorted(out, reverse=True)

    def describe(self) -> str:
        """The buckets' times for the log, e.g. ``8: 0.62 ms, 64: 4.10 ms``."""
        if not self.measured:
            return "not measured (the smallest bucket that holds a batch)"
        return ", ".join(f"{b}: {t * 1e3:.2f} ms" for b, t in zip(self.buckets, self.seconds))
