"""Late batch buckets (tritonprep.classifier.late_buckets, adopted by tritonprep.classifier.ort_cuda): made on a thread
of their own, taken by the serving thread once all are made, left out where one fails, stopped by ``terminate``. The
sessions, buffers and stream are the host fakes of tests/unit/ort_fakes.py (no GPU on this machine)."""

from __future__ import annotations

import logging
import threading
import time

import numpy as np
import pytest

from tests.unit.ort_fakes import DIMS, bucket, expected, runtime
from tritonprep.classifier.late_buckets import LateBuckets


class RunOptions:
    """ONNX Runtime's ``RunOptions``, as far as a stop uses it."""

    terminate = False


def wait_ready(late: LateBuckets, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not late.ready():
        assert time.monotonic() < deadline, "the late buckets' thread did not finish"
        time.sleep(0.005)


def test_the_thread_makes_and_runs_each_bucket_and_leaves_out_one_that_fails(caplog):
    made: list[int] = []
    first_runs: list[tuple[int, object]] = []
    released: list[int] = []
    options = RunOptions()

    def make(size: int):
        if size == 2:
            raise RuntimeError("no memory for bucket 2")
        made.append(size)
        return bucket(size)

    def first_run(b, opts) -> None:
        first_runs.append((b.size, opts))
        if b.size == 4:
            raise RuntimeError("cuDNN failed")

    with caplog.at_level(logging.INFO):
        late = LateBuckets((1, 2, 4), make, first_run, lambda b: released.append(b.size), options, "the classifier")
        wait_ready(late)
    taken = late.take()
    assert [b.size for b in taken] == [1]
    assert made == [1, 4] and [s for s, _ in first_runs] == [1, 4] and all(o is options for _, o in first_runs)
    assert released == [4]  # made, then its first run failed: let go; bucket 2 was never made
    assert "late bucket 2 not made (no memory for bucket 2)" in caplog.text
    assert "late bucket 4 failed its first run (cuDNN failed)" in caplog.text
    assert {"late_b1", "late_buckets"} <= set(late.timings) and "late_b4" not in late.timings
    assert not late.ready() and late.take() == []  # taken once
    assert "the classifier: late bucket(s) made 1 in " in caplog.text and "used from the next call" in caplog.text


def test_the_thread_says_when_it_is_done_even_with_nothing_made(caplog):
    """The line a benchmark waits for before it measures (scripts.bench.harness.serving.wait_for_late_buckets)."""

    def make(size: int):
        raise RuntimeError("out of memory")

    with caplog.at_level(logging.INFO):
        late = LateBuckets((1,), make, lambda b, o: None, lambda b: None, RunOptions(), "the embedder")
        wait_ready(late)
    assert "the embedder: late bucket(s) made none in " in caplog.text
    assert "the start's buckets serve on" in caplog.text


def test_a_benchmark_waits_for_every_instance_that_announced_late_buckets(tmp_path):
    from scripts.bench.harness.serving import late_buckets_pending, wait_for_late_buckets

    start = (
        'I1127 pb.py:33] "tritonprep.classifier.ort_cuda: classifier on GPU 0: onnxruntime-cuda+graphs+nhwc, batch '
        "buckets 8,64 (one session each, captured while loading; one run 8: 0.86 ms, 64: 2.56 ms), late buckets 1 made "
        'while serving, cuDNN heuristic/ws0/same_as_requested/fused-bias-b64; started in ..."\n'
    )
    done = (
        'I1127 pb.py:33] "tritonprep.classifier.late_buckets: classifier on GPU 0: late bucket(s) made 1 in 2.80 s"\n'
    )
    other = (
        'I1127 pb.py:33] "tritonprep.classifier.ort_cuda: classifier on GPU 0: ... batch buckets 8,64 (...), cuDNN"\n'
    )
    assert late_buckets_pending(start + start + other + done) == 1
    assert late_buckets_pending(start + done + start + done) == 0 and late_buckets_pending(other) == 0
    log = tmp_path / "triton.log"
    log.write_text("an earlier server's lines: " + start)
    offset = log.stat().st_size
    with log.open("a") as f:
        f.write(start + start + done)
    assert wait_for_late_buckets(log, offset, timeout_s=0.3) is None  # one instance never said it was done
    with log.open("a") as f:
        f.write(done)
    assert wait_for_late_buckets(log, offset, timeout_s=5) == pytest.approx(0, abs=0.5)


def test_stop_ends_a_first_run_in_progress_through_terminate_and_hands_back_nothing_it_still_holds(caplog):
    options = RunOptions()
    entered = threading.Event()
    released: list[int] = []

    def first_run(b, opts) -> None:  # as ONNX Runtime's run: it checks terminate between nodes
        entered.set()
        while not opts.terminate:
            time.sleep(0.001)
        raise RuntimeError("Exiting due to terminate flag being set to true.")

    late = LateBuckets((1, 8), bucket, first_run, lambda b: released.append(b.size), options)
    assert entered.wait(5)
    t0 = time.perf_counter()
    with caplog.at_level(logging.WARNING):
        assert late.stop(wait_s=5) == []
    assert time.perf_counter() - t0 < 1.0
    assert released == [1]  # bucket 8 was never begun
    assert "failed its first run" not in caplog.text  # a stop is not a failure


def test_stop_after_the_thread_is_done_hands_back_what_nobody_took():
    late = LateBuckets((1,), bucket, lambda b, o: None, lambda b: None, RunOptions())
    wait_ready(late)
    assert [b.size for b in late.stop()] == [1]


def serving(sizes: tuple[int, ...] = (8,), late: tuple[int, ...] = (1,), first_run=None, graphs: bool = False):
    """A runtime serving on ``sizes`` whose ``late`` buckets are made (fakes: no GPU)."""
    rt = runtime(sizes)
    rt.cuda_graphs = graphs
    rt.caps_mb = dict.fromkeys((*sizes, *late), 0)
    rt._late = LateBuckets(late, bucket, first_run or (lambda b, o: None), lambda b: None, RunOptions())
    wait_ready(rt._late)
    return rt


def test_the_serving_thread_adopts_the_late_bucket_at_its_next_call_and_runs_a_lone_image_on_it():
    rt = serving()
    assert rt.plan.chunks(1) == [8]
    batch = np.random.default_rng(0).random((1, *DIMS), dtype=np.float32)
    got = rt.infer(batch)
    np.testing.assert_allclose(got, expected(batch), rtol=1e-6)
    assert [b.size for b in rt._buckets] == [1, 8] and rt._late is None
    assert rt.plan.chunks(1) == [1] and rt.plan.measured
    assert rt._buckets[0].session.runs >= 1 + 5  # the call's run, after the measure's replays
    assert {"late_b1", "late_buckets", "late_adopt"} <= set(rt.timings)
    many = np.random.default_rng(1).random((8, *DIMS), dtype=np.float32)
    np.testing.assert_allclose(rt.infer(many), expected(many), rtol=1e-6)


def test_with_graphs_a_call_on_another_thread_leaves_the_late_buckets_out(caplog):
    """Graphs are per thread: ONNX Runtime captures the network again on a thread it was not warmed up on, which needs
    the process's CUDA work to itself, so the late buckets are stopped and let go rather than adopted there."""
    rt = serving(graphs=True)
    late = rt._late
    made = late._made[0]
    rt._warned_thread = True  # the other thread's call warns once; not what this test reads
    batch = np.zeros((1, *DIMS), np.float32)
    other = threading.Thread(target=rt.infer, args=(batch,))
    with caplog.at_level(logging.WARNING):
        other.start()
        other.join()
    assert rt._late is None and made.session is None and not late.running()
    assert rt.plan.chunks(1) == [8] and [b.size for b in rt._buckets] == [8]
    assert "late buckets left out: the network runs on another thread than it was warmed up on" in caplog.text
    rt.infer(batch)  # the warm thread: nothing left to adopt
    assert rt.plan.chunks(1) == [8]


def test_a_bucket_made_while_a_stop_waits_is_let_go_on_the_thread():
    """A session cannot be interrupted while it is created: one made after the stop asked is released by the thread
    (while the runtime's stream lives), neither run nor handed back."""
    entered, go = threading.Event(), threading.Event()
    released: list[int] = []
    runs: list[int] = []

    def make(size: int):
        entered.set()
        go.wait(5)
        return bucket(size)

    late = LateBuckets((1, 2), make, lambda b, o: runs.append(b.size), lambda b: released.append(b.size), RunOptions())
    assert entered.wait(5)
    stopper = threading.Thread(target=lambda: late.stop(wait_s=5))
    stopper.start()
    time.sleep(0.05)  # the stop is waiting for the thread
    go.set()
    stopper.join()
    assert released == [1] and runs == [] and not late.running() and late.take() == []


def test_a_late_bucket_whose_capture_fails_is_left_out(caplog):
    rt = serving(graphs=True)
    late = rt._late._made[0]

    def refuse(binding: object, options: object = None) -> None:
        raise RuntimeError("CUDA graph capture failed")

    late.session.run_with_iobinding = refuse
    batch = np.random.default_rng(2).random((1, *DIMS), dtype=np.float32)
    with caplog.at_level(logging.WARNING):
        got = rt.infer(batch)
    np.testing.assert_allclose(got, expected(batch), rtol=1e-6)
    assert [b.size for b in rt._buckets] == [8] and rt.plan.chunks(1) == [8]
    assert late.session is None  # released
    assert "late bucket 1 left out: its capture failed (CUDA graph capture failed)" in caplog.text


@pytest.mark.parametrize("late", [(8,), (0,), (4, 1), (1, 1)])
def test_the_runtime_refuses_late_sizes_it_already_has_or_that_are_not_sizes(late):
    from tritonprep.classifier.ort_cuda import OrtCudaRuntime
    from tritonprep.errors import ConfigError

    with pytest.raises(ConfigError, match="late_batch_buckets must be increasing positive sizes that batch_buckets"):
        OrtCudaRuntime(__file__, DIMS, buckets=(8, 64), late_buckets=late)


class Pool:
    def __init__(self) -> None:
        self.freed = 0

    def free_all_blocks(self) -> None:
        self.freed += 1


class Cupy:
    """What the runtime's close reads of CuPy: its CUDA error types and the memory pool (host fakes)."""

    class cuda:  # noqa: N801 - CuPy's module name
        class runtime:  # noqa: N801
            class CUDARuntimeError(Exception):  # noqa: N818 - CuPy's name
                pass

        class driver:  # noqa: N801
            class CUDADriverError(Exception):  # noqa: N818 - CuPy's name
                pass

    def __init__(self) -> None:
        self.pool = Pool()

    def get_default_memory_pool(self) -> Pool:
        return self.pool


def closing(late: LateBuckets):
    rt = runtime((8,))
    rt._closed, rt._own_stream, rt._cp = False, True, Cupy()
    rt._late = late
    return rt


def test_close_stops_the_thread_and_releases_the_late_buckets_nobody_took():
    late = LateBuckets((1,), bucket, lambda b, o: None, lambda b: None, RunOptions())
    wait_ready(late)
    made = late._made[0]
    rt = closing(late)
    start = rt._buckets[0]
    rt.close()
    assert made.session is None and start.session is None  # both released
    assert rt._cp.pool.freed == 1 and rt.stream is None and rt._late is None


def test_a_close_whose_stop_times_out_keeps_the_stream_and_the_pool_for_the_thread(monkeypatch):
    """A session being created cannot be interrupted: past the stop's wait the thread may still use the runtime's
    stream and memory, so the close leaves both (the process's end frees them)."""
    from tritonprep.classifier import late_buckets

    monkeypatch.setattr(late_buckets, "STOP_WAIT_S", 0.05)
    go = threading.Event()
    released: list[int] = []

    def make(size: int):
        go.wait(5)  # inside ONNX Runtime, deaf to terminate
        return bucket(size)

    late = LateBuckets((1,), make, lambda b, o: None, lambda b: released.append(b.size), RunOptions())
    rt = closing(late)
    stream = rt.stream
    rt.close()
    assert late.running() and rt.stream is stream and rt._cp.pool.freed == 0
    go.set()  # the session is made after all: the thread lets it go itself
    late._thread.join(5)
    assert released == [1] and not late.running()


def test_under_the_launcher_the_thread_waits_for_the_server_to_be_ready_first(tmp_path, monkeypatch):
    """Late first runs beside the other models' loads made the repository ready later: the thread makes nothing until
    the launcher has said the server is ready (its report folder's marker), and a stop while it waits ends it."""
    from tritonprep import reports
    from tritonprep.triton.health import server_ready_probe

    monkeypatch.delenv(reports.ENV, raising=False)
    assert server_ready_probe() is None  # no launcher: nothing will say so, the thread starts at once
    monkeypatch.setenv(reports.ENV, str(tmp_path))
    probe = server_ready_probe()
    assert probe is not None and not probe()
    made: list[int] = []
    late = LateBuckets((1,), lambda s: made.append(s) or bucket(s), lambda b, o: None, lambda b: None, start_when=probe)
    time.sleep(0.3)
    assert made == [] and late.running() and not late.ready()
    reports.mark_server_ready(tmp_path)  # what the launcher does once the server answers ready
    wait_ready(late)
    assert made == [1] and late.timings["late_wait"] >= 0.3
    waiting = LateBuckets((1,), lambda s: made.append(s) or bucket(s), lambda b, o: None, lambda b: None,
                          start_when=lambda: False)  # fmt: skip
    t0 = time.monotonic()
    assert waiting.stop() == [] and not waiting.running() and time.monotonic() - t0 < 1.0
    assert made == [1]  # the stopped one made nothing


def test_the_launcher_marks_its_start_ready_for_the_instances(tmp_path, monkeypatch):
    from tritonprep import reports
    from tritonprep.launcher import endpoints, process
    from tritonprep.launcher.options import ServerOptions

    server = process.EmbeddedServer(ServerOptions())
    monkeypatch.setattr(endpoints.Endpoints, "wait_ready", lambda self, timeout_s=300.0, cancel=None: None)
    server.wait_ready()  # no start yet: no report folder, nothing to mark
    server._workdir = tmp_path
    server.wait_ready()
    assert reports.server_ready({reports.ENV: str(tmp_path / "reports")}) is True
    assert reports.server_ready({}) is None


def test_a_ready_check_that_fails_does_not_keep_the_late_buckets_from_being_made(caplog):
    def broken() -> bool:
        raise PermissionError("report folder unreadable")

    made: list[int] = []
    with caplog.at_level(logging.WARNING):
        late = LateBuckets((1,), lambda s: made.append(s) or bucket(s), lambda b, o: None, lambda b: None,
                           what="the classifier", start_when=broken)  # fmt: skip
        wait_ready(late)
    assert made == [1] and "cannot tell whether the server is ready (report folder unreadable)" in caplog.text
