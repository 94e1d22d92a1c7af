"""Batch buckets made while the network already serves: built on a thread of their own, adopted by the serving thread.

A bucket session costs seconds at start (its first run: cuDNN's per-shape work, and with fused bias the fused
kernels' compile), and the classifier's start is the repository's longest path. A *late* bucket
(``late_batch_buckets``, :mod:`.runtimes`) is made after the model has loaded, while requests run on the buckets
made at start: a thread creates its session, binds its buffers and runs it once, neither capturing nor replaying.
Once the thread has made them all, the runtime's serving thread, at its next call, captures each one's CUDA graph
(ONNX Runtime keeps a session's graphs per thread, and a capture needs the process's CUDA work to itself: the
thread is done by then), times its replay and adds it to the bucket plan (:mod:`.ort_cuda`). From that call on, a
lone image runs on a 1 bucket, say, instead of padded into the 8 of the start.

Under the launcher the thread first waits until the server is ready (``start_when``: its word in the start's report
folder, :func:`tritonprep.reports.server_ready`), at most :data:`START_WAIT_S`: a first run beside the other models'
loads slowed them (with fused bias, cuDNN's compile made the repository ready 3.4-5.5 s later, stage 23), while
after the start it costs nobody a wait. Without the launcher nothing says so, and the thread starts at once.

A late bucket that cannot be made is logged and left out; the network goes on with the others. Stopping asks a
first run in progress to end (ONNX Runtime's run option ``terminate``) and waits a bounded time for the thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

log = logging.getLogger(__name__)

#: how long stopping waits for the thread (a session being created cannot be interrupted), seconds
STOP_WAIT_S = 10.0
#: the longest the thread waits for ``start_when`` before it starts anyway (the launcher's own wait for ready), seconds
START_WAIT_S = 300.0
#: the words of the log line that says the thread is done: ``<what>: late bucket(s) made 1 in 2.80 s, ...``
MADE = "late bucket(s) made"
#: the words of the network's start line where it has late buckets (:mod:`.ort_cuda`): ``late buckets 1 made while
#: serving``
ANNOUNCED = "made while serving"


class LateBuckets:
    """The late buckets of one network: ``make(size)`` returns a bucket (its session and bound buffers),
    ``first_run(bucket, run_options)`` runs it once without capturing, ``release(bucket)`` lets one go that will
    not be used. ``run_options``: the first runs' ONNX Runtime ``RunOptions`` (its ``terminate`` stops one in
    progress), None where there is none."""

    def __init__(
        self,
        sizes: Sequence[int],
        make: Callable[[int], Any],
        first_run: Callable[[Any, Any], object],
        release: Callable[[Any], object],
        run_options: Any = None,
        what: str = "the network",
        start_when: Callable[[], bool] | None = None,
    ) -> None:
        """``start_when``: polled until True (or :data:`START_WAIT_S` passed) before the first bucket is made; None:
        at once."""
        self.sizes = tuple(sizes)
        self.what = what
        #: seconds each late bucket took to make and run once (``late_b<N>``), and the thread's whole time
        self.timings: dict[str, float] = {}
        self._make, self._first_run, self._release = make, first_run, release
        self._options = run_options
        self._start_when = start_when
        self._made: list[Any] = []
        self._stopping = threading.Event()
        self._taken = False
        self._thread = threading.Thread(target=self._build, name="tritonprep-late-buckets", daemon=True)
        self._thread.start()

    def _wait_for_start(self) -> None:
        """Until ``start_when`` says so, a stop, or :data:`START_WAIT_S` (then it starts anyway, and says why)."""
        if self._start_when is None:
            return
        t0 = time.perf_counter()
        while not self._stopping.is_set():
            try:
                if self._start_when():
                    break
            except Exception as e:  # noqa: BLE001 - the buckets are made all the same: the wait only orders them
                log.warning(
                    "%s: cannot tell whether the server is ready (%s); making the late buckets now", self.what, e
                )
                break
            if time.perf_counter() - t0 > START_WAIT_S:
                log.warning(
                    "%s: the server is not ready after %.0f s; making the late buckets now", self.what, START_WAIT_S
                )
                break
            self._stopping.wait(0.1)
        self.timings["late_wait"] = time.perf_counter() - t0

    def _build(self) -> None:
        self._wait_for_start()
        start = time.perf_counter()
        for size in self.sizes:
            if self._stopping.is_set():
                break
            t0 = time.perf_counter()
            try:
                bucket = self._make(size)
            except Exception as e:  # noqa: BLE001 - ONNX Runtime raises its own types; the others serve on
                log.warning("%s: late bucket %d not made (%s); batches run on the other buckets", self.what, size, e)
                continue
            if self._stopping.is_set():  # made while a stop waited: let it go here, while its stream lives
                self._release(bucket)
                break
            try:
                self._first_run(bucket, self._options)
            except Exception as e:  # noqa: BLE001 - as above; a stop's terminate ends a run this way too
                if not self._stopping.is_set():
                    log.warning("%s: late bucket %d failed its first run (%s); left out", self.what, size, e)
                self._release(bucket)
                continue
            self.timings[f"late_b{size}"] = time.perf_counter() - t0
            self._made.append(bucket)
        self.timings["late_buckets"] = time.perf_counter() - start
        if not self._stopping.is_set():  # what a benchmark waits for before it measures
            sizes = ",".join(str(b.size) for b in self._made)
            then = "used from the next call" if sizes else "the start's buckets serve on"
            log.info("%s: %s %s in %.2f s, %s", self.what, MADE, sizes or "none", self.timings["late_buckets"], then)

    def running(self) -> bool:
        """Whether the thread is still at work (after a :meth:`stop` that timed out: inside ONNX Runtime)."""
        return self._thread.is_alive()

    def ready(self) -> bool:
        """Whether the thread is done and its buckets are still to be taken."""
        return not self._taken and not self._thread.is_alive()

    def take(self) -> list[Any]:
        """The buckets the thread made (once; call it after :meth:`ready`)."""
        self._taken = True
        made, self._made = self._made, []
        return made

    def stop(self, wait_s: float | None = None) -> list[Any]:
        """Stop the thread: a first run in progress is asked to end; wait up to ``wait_s`` (:data:`STOP_WAIT_S`
        unless given). The buckets made and
        not taken, for the caller to release; none if the thread is still inside ONNX Runtime (:meth:`running`: what
        it holds stays with it, and the caller must keep the stream and memory it may use)."""
        self._stopping.set()
        if self._options is not None:
            self._options.terminate = True
        wait_s = STOP_WAIT_S if wait_s is None else wait_s
        self._thread.join(wait_s)
        if self._thread.is_alive():
            log.warning(
                "%s: the late buckets' thread did not stop within %.0f s; left to the process's end", self.what, wait_s
            )
            return []
        return [] if self._taken else self.take()
