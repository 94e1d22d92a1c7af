"""The GPU executor's answer to running out of GPU memory, without a GPU: a batch that does not fit is tried
once more with the pool's cached blocks freed, then again each time memory held elsewhere (earlier batches'
outputs on their way to Triton, for one) comes back, for up to OUTPUT_WAIT_S; then it fails with ResourceExhausted
(the model retries it request by request). Each retry, and the model's, must start without the failed
attempt's arrays: they are freed before the pool is released, and the error carries no traceback that would
keep them."""

from __future__ import annotations

import gc
import weakref
from types import SimpleNamespace

import pytest

from tritonprep.errors import ResourceExhausted
from tritonprep.executors import gpu


class FakeOutOfMemory(Exception):
    """CuPy's OutOfMemoryError."""


class Arrays:
    """What an attempt holds on the GPU."""


class Pool:
    """CuPy's memory pool: ``used`` bytes held by arrays alive elsewhere, less each poll by ``returned``."""

    def __init__(self, used: int, returned: int = 0) -> None:
        self.used, self.returned, self.polls = used, returned, 0

    def used_bytes(self) -> int:
        self.polls += 1
        self.used = max(0, self.used - (self.returned if self.polls > 3 else 0))
        return self.used


class Clock:
    """The executor's clock: its sleeps advance it at once (the tests do not depend on the machine's load)."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def executor(
    monkeypatch: pytest.MonkeyPatch, fits_on_attempt: int | None, pool: Pool | None = None
) -> tuple[gpu.GpuExecutor, dict]:
    """A GpuExecutor whose run allocates Arrays and runs out of memory until ``fits_on_attempt``."""
    seen: dict = {"attempts": [], "alive_at_release": [], "alive_at_attempt": [], "clock": Clock()}
    monkeypatch.setattr(gpu, "resolve_wanted", lambda config, n, wanted: {})
    clock = seen["clock"]
    monkeypatch.setattr(gpu, "time", SimpleNamespace(monotonic=clock.monotonic, sleep=clock.sleep))
    ex = gpu.GpuExecutor.__new__(gpu.GpuExecutor)
    pool = pool or Pool(96 << 20)
    ex.cp = SimpleNamespace(
        cuda=SimpleNamespace(memory=SimpleNamespace(OutOfMemoryError=FakeOutOfMemory)),
        get_default_memory_pool=lambda: pool,
    )
    ex.device = SimpleNamespace(id=0)
    ex.config = None
    ex.pool_limit_mb = 100
    ex.stream = SimpleNamespace(synchronize=lambda: None)

    def alive() -> int:
        return sum(r() is not None for r in seen["attempts"])

    def run(images, rows, synchronize=True):
        seen["alive_at_attempt"].append(alive())
        arrays = Arrays()
        seen["attempts"].append(weakref.ref(arrays))
        if len(seen["attempts"]) == fits_on_attempt:
            return "result"
        try:  # the exception in a local of the frame that holds the arrays: a cycle, as real code makes them
            raise FakeOutOfMemory("Out of memory allocating 9,633,792 bytes")
        except FakeOutOfMemory as e:
            failure = e
            raise failure from None

    ex._run = run
    ex._release_pools = lambda: seen["alive_at_release"].append(alive())
    return ex, seen


@pytest.fixture(autouse=True)
def _no_automatic_collection():
    """Only the executor's own collection may free cyclic garbage here."""
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def test_a_batch_that_fits_once_the_pool_is_freed_is_answered(monkeypatch):
    ex, seen = executor(monkeypatch, fits_on_attempt=2)
    assert ex.run([b"x"] * 8) == "result"
    assert seen["alive_at_release"] == [0] and seen["alive_at_attempt"] == [0, 0]


def test_a_batch_that_never_fits_is_resource_exhausted_holding_nothing(monkeypatch):
    ex, seen = executor(monkeypatch, fits_on_attempt=None)
    with pytest.raises(ResourceExhausted, match=r"8 image\(s\) do not fit .* 100 MiB\): Out of memory allocating") as e:
        ex.run([b"x"] * 8)
    assert seen["alive_at_release"] == [0, 0] and seen["alive_at_attempt"] == [0, 0]
    assert e.value.__context__ is None and e.value.__cause__ is None
    assert all(r() is None for r in seen["attempts"])  # while the error lives (the model keeps it per request)


def test_a_batch_waits_for_earlier_outputs_to_come_back(monkeypatch):
    """The pool is full of memory held elsewhere, which comes back a moment later: the third attempt fits."""
    pool = Pool(96 << 20, returned=10 << 20)
    ex, seen = executor(monkeypatch, fits_on_attempt=3, pool=pool)
    assert ex.run([b"x"] * 8) == "result"
    assert len(seen["attempts"]) == 3 and seen["alive_at_attempt"] == [0, 0, 0]
    assert pool.polls > 3 and seen["clock"].now < gpu.OUTPUT_WAIT_S


def test_the_wait_for_memory_is_bounded(monkeypatch):
    pool = Pool(96 << 20)  # nothing comes back
    ex, seen = executor(monkeypatch, fits_on_attempt=None, pool=pool)
    with pytest.raises(ResourceExhausted):
        ex.run([b"x"] * 8)
    assert seen["clock"].now == pytest.approx(gpu.OUTPUT_WAIT_S, abs=0.01) and len(seen["attempts"]) == 2
