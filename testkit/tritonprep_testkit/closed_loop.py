"""A closed loop whose every answer is checked: clients (threads of this process or of spawned ones) sending
requests back to back, each answer compared with a reference taken once per photo at c=1, every outcome tallied.

The building block of the overload sweep (:mod:`.overload_sweep`). A request refused or failed is followed by a
small fixed backoff, so a refused client does not spin. Traffic goes to the URL given only, until the end of a
bounded window.
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tritonprep_client import image_input

from .loadgen import GrpcSender, categorize

#: the category of a request answered, but not as the reference answered it
WRONG = "wrong-answer"
#: a reference's classes whose score is this close to its top-1's are accepted as top-1 too (a near tie may flip
#: with the batch a request lands in)
TIE = 0.02


def batches_of(photos: int, n: int) -> tuple[tuple[int, ...], ...]:
    """Requests of ``n`` photo indexes that send every one of ``photos`` photos at least once (wrapping around)."""
    count = max(1, math.ceil(photos / n))
    return tuple(tuple((b * n + m) % photos for m in range(n)) for b in range(count))


# ---------------------------------------------------------------------- answers
@dataclass(frozen=True)
class Expected:
    """What a right answer is: each output's shape per image (None: it differs between photos, only the batch
    dimension is checked) and, for a classifier (``CLASS_IDS`` and ``SCORES``), each photo's top-1 classes."""

    shapes: dict[str, tuple[int, ...] | None]
    top1: tuple[frozenset[int], ...] | None = None

    def check(self, result: Any, photos: Sequence[int]) -> str:
        """An empty string when ``result`` (of a request carrying ``photos``, by index) is right, else what is wrong."""
        for name, shape in self.shapes.items():
            arr = result.as_numpy(name)
            if arr is None:
                return f"no output {name}"
            if arr.shape[0] != len(photos) or (shape is not None and tuple(arr.shape[1:]) != shape):
                return f"{name} has shape {arr.shape}, expected ({len(photos)}, {shape or '...'})"
        if self.top1 is not None:
            ids = result.as_numpy("CLASS_IDS")[:, 0]
            for m, p in enumerate(photos):
                if int(ids[m]) not in self.top1[p]:
                    return f"image {m} (photo {p}): top-1 class {int(ids[m])}, the reference's {sorted(self.top1[p])}"
        return ""


def reference(url: str, model: str, photos: Sequence[bytes], timeout_s: float = 60.0) -> Expected:
    """Each photo sent alone, one request at a time: the answers every later one is checked against."""
    sender = GrpcSender(url)
    try:
        names = [o["name"] for o in sender.client.get_model_metadata(model, as_json=True)["outputs"]]
        shapes: dict[str, tuple[int, ...] | None] = {}
        top1: list[frozenset[int]] = []
        for i, photo in enumerate(photos):
            result = sender.client.infer(model, [image_input([photo], sender.m)], client_timeout=timeout_s)
            for name in names:
                shape = tuple(result.as_numpy(name).shape[1:])
                shapes[name] = shape if i == 0 or shapes.get(name) == shape else None
            if "CLASS_IDS" in names and "SCORES" in names:
                ids, scores = result.as_numpy("CLASS_IDS")[0], result.as_numpy("SCORES")[0]
                top1.append(frozenset(int(c) for c, s in zip(ids, scores) if scores[0] - s <= TIE))
    finally:
        sender.close()
    return Expected(shapes, tuple(top1) if top1 else None)


# ---------------------------------------------------------------------- the closed loop
@dataclass(frozen=True)
class Load:
    """A closed loop: ``concurrency`` clients sending ``model`` requests (``batches``: photo indexes) back to back."""

    url: str
    model: str
    batches: tuple[tuple[int, ...], ...]
    concurrency: int
    backoff_s: float
    timeout_s: float


@dataclass
class Tally:
    """What clients got: every request's outcome by category (the first message of each), and the requests answered
    right within the measurement window (their latencies, their images)."""

    counts: Counter = field(default_factory=Counter)
    samples: dict[str, str] = field(default_factory=dict)
    latencies: list[float] = field(default_factory=list)
    images: int = 0

    def add(self, category: str, message: str, start: float, end: float, images: int, window: Sequence[float]) -> None:
        """One request's outcome."""
        self.counts[category] += 1
        if message and category not in self.samples:
            self.samples[category] = message
        if category == "ok" and window[0] <= end <= window[1]:
            self.latencies.append(end - start)
            self.images += images

    def merge(self, other: Tally) -> None:
        """Add another client's (or process's) tally."""
        self.counts.update(other.counts)
        for category, message in other.samples.items():
            self.samples.setdefault(category, message)
        self.latencies += other.latencies
        self.images += other.images


def drive(
    load: Load, photos: Sequence[bytes], expected: Expected, first: int, threads: int, window: Sequence[float]
) -> Tally:
    """Clients ``first`` .. ``first + threads - 1`` of ``load`` (a thread each, until the window's end); their tally."""
    from tritonclient.utils import InferenceServerException

    inputs = [image_input([photos[p] for p in batch], "grpc") for batch in load.batches]
    tally, lock = Tally(), threading.Lock()

    def client(i: int) -> None:
        sender, j, done = GrpcSender(load.url), first + i, False
        try:
            while time.monotonic() < window[1]:
                b = j % len(inputs)
                j += load.concurrency
                start, message = time.monotonic(), ""
                try:
                    result = sender.client.infer(load.model, [inputs[b]], client_timeout=load.timeout_s)
                except InferenceServerException as e:
                    end = time.monotonic()
                    status, message = str(e.status() or ""), str(e.message() or e)
                    category, message = categorize(status, message), f"{status} {message}"[:300]
                else:
                    end = time.monotonic()
                    message = expected.check(result, load.batches[b])
                    category = WRONG if message else "ok"
                with lock:
                    tally.add(category, message, start, end, len(load.batches[b]), window)
                if category != "ok":
                    time.sleep(load.backoff_s)
            done = True
        finally:
            sender.close()
            if not done:  # its exception goes to threading's excepthook (stderr)
                with lock:
                    tally.add("client-failed", "a client thread raised (see stderr)", 0.0, 0.0, 0, window)

    workers = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join(max(0.0, window[1] - time.monotonic()) + load.timeout_s + 10)
    with lock:
        return tally


def _process(load: Load, photos: Sequence[bytes], expected: Expected, first: int, threads: int, ready: Any, go: Any,
             window: Any, out: Any) -> None:  # fmt: skip
    """A spawned client process: says it is ready, waits for the window, drives its share, sends its tally."""
    ready.put(first)
    go.wait()
    out.put(drive(load, photos, expected, first, threads, tuple(window)))


def _shares(concurrency: int, processes: int) -> list[tuple[int, int]]:
    """(first client, clients) of each process: ``concurrency`` split as evenly as can be."""
    n = max(1, min(processes, concurrency))
    return [(k * concurrency // n, (k + 1) * concurrency // n - k * concurrency // n) for k in range(n)]


def _get(queue: Any, procs: list[Any], timeout_s: float) -> Any:
    """The next item of ``queue``; a RuntimeError once a client process has failed or ``timeout_s`` passed."""
    import queue as queues

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return queue.get(timeout=1.0)
        except queues.Empty:
            failed = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
            if failed or time.monotonic() > deadline:
                raise RuntimeError(f"client processes failed (exit codes {failed}) or timed out") from None


def closed_loop(load: Load, photos: Sequence[bytes], expected: Expected, seconds: float, warmup_s: float,
                processes: int = 0) -> tuple[Tally, float]:  # fmt: skip
    """Run ``load`` for ``warmup_s`` + ``seconds`` (the measurement window is the last ``seconds``); its tally and
    the window's length."""
    if processes == 0:
        now = time.monotonic()
        return drive(load, photos, expected, 0, load.concurrency, (now + warmup_s, now + warmup_s + seconds)), seconds
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    ready, out, go, window = ctx.Queue(), ctx.Queue(), ctx.Event(), ctx.Array("d", 2)
    shares = _shares(load.concurrency, processes)
    procs = [ctx.Process(target=_process, args=(load, photos, expected, first, n, ready, go, window, out), daemon=True)
             for first, n in shares]  # fmt: skip
    for p in procs:
        p.start()
    try:
        for _ in procs:
            _get(ready, procs, 120)
        now = time.monotonic()
        window[0], window[1] = now + warmup_s, now + warmup_s + seconds
        go.set()
        tally = Tally()
        for _ in procs:
            tally.merge(_get(out, procs, warmup_s + seconds + load.timeout_s + 60))
    finally:
        for p in procs:
            p.join(10)
            if p.is_alive():
                p.kill()
    return tally, seconds


class PeakMemory:
    """The peak of ``read()`` (bytes by process, e.g. :func:`~.loadgen.memory`), in total and per process, sampled
    every ``period`` s in a thread while in the ``with`` block; nothing without a reader."""

    def __init__(self, read: Callable[[], dict[str, int]] | None, period: float = 0.25) -> None:
        self.read, self.period = read, period
        self.peak, self.by_process = 0, {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="peak-memory")

    def sample(self) -> None:
        """Read once and keep the peaks."""
        now = self.read() if self.read else {}
        self.peak = max(self.peak, sum(now.values()))
        for key, value in now.items():
            self.by_process[key] = max(self.by_process.get(key, 0), value)

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            self.sample()

    def __enter__(self) -> PeakMemory:
        if self.read is not None:
            self.sample()
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.read is not None:
            self._stop.set()
            self._thread.join()
            self.sample()


def after_check(load: Load, photos: Sequence[bytes], expected: Expected) -> tuple[bool, str]:
    """Whether the server says it is ready, and what one request of ``load``'s first batch got (``ok``: answered
    right)."""
    from tritonclient.utils import InferenceServerException

    sender = GrpcSender(load.url)
    try:
        ready = bool(sender.client.is_server_ready())
        batch = load.batches[0]
        try:
            result = sender.client.infer(load.model, [image_input([photos[p] for p in batch], sender.m)],
                                         client_timeout=load.timeout_s)  # fmt: skip
        except InferenceServerException as e:
            return ready, f"{categorize(str(e.status() or ''), str(e.message() or e))}: {e}"[:300]
        wrong = expected.check(result, batch)
        return ready, f"{WRONG}: {wrong}" if wrong else "ok"
    finally:
        sender.close()
