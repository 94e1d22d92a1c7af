"""A model's finalize: outside a Triton stub it releases the instance and leaves the process alone; inside,
the stub ends itself after a good release, once its GPU is idle, and otherwise ends the usual way."""

from __future__ import annotations

import logging
import sys
from types import SimpleNamespace

import pytest

from tritonprep import cuda
from tritonprep.triton import pb, stub


@pytest.fixture(autouse=True)
def fresh_process(monkeypatch):
    """This process as a new one: no sticky error seen, no end announced (other tests poison it on purpose);
    the ``tritonprep`` logger's handlers as they were."""
    monkeypatch.setattr(cuda, "_POISONED", set())
    monkeypatch.setattr(cuda, "_ENDING", [False])
    root = logging.getLogger("tritonprep")
    handlers, propagate = list(root.handlers), root.propagate
    yield
    root.handlers[:] = handlers
    root.propagate = propagate


@pytest.fixture
def in_stub(monkeypatch):
    """As inside a stub; the exit recorded instead of taken."""
    exits: list[int] = []
    monkeypatch.setattr(stub, "in_stub_process", lambda: True)
    monkeypatch.setattr(stub.os, "_exit", exits.append)
    return exits


class FakeCudaError(Exception):
    pass


def fake_cupy(context: int = 1, sync_error: Exception | None = None, ctx_error: Exception | None = None):
    """A stand-in for CuPy's driver and runtime calls the stub's end makes; ``calls`` records them."""
    calls: list[str] = []

    def ctx_get_current() -> int:
        calls.append("ctxGetCurrent")
        if ctx_error is not None:
            raise ctx_error
        return context

    def device_synchronize() -> None:
        calls.append("deviceSynchronize")
        if sync_error is not None:
            raise sync_error

    runtime = SimpleNamespace(CUDARuntimeError=FakeCudaError, deviceSynchronize=device_synchronize)
    driver = SimpleNamespace(CUDADriverError=FakeCudaError, ctxGetCurrent=ctx_get_current)
    return SimpleNamespace(cuda=SimpleNamespace(runtime=runtime, driver=driver)), calls


def test_outside_a_stub_finalize_releases_and_returns():
    closed = []
    assert not stub.in_stub_process()  # pytest's executable is Python
    stub.finalize_instance(lambda: closed.append(True))
    assert closed == [True] and not cuda.process_ending()


def test_a_stub_marks_its_end_before_closing_and_exits_after(monkeypatch, in_stub):
    """close() runs knowing that the process ends, with the records going to stderr (not Triton's logger, whose
    exchange with the server must not be cut by the exit), then the stub exits with 0."""
    monkeypatch.delitem(sys.modules, "cupy", raising=False)
    seen = []

    def close() -> None:
        handlers = logging.getLogger("tritonprep").handlers
        seen.append((cuda.process_ending(), [type(h).__name__ for h in handlers], list(in_stub)))

    pb.setup_logging()
    stub.finalize_instance(close)
    assert seen == [(True, ["StreamHandler"], [])] and in_stub == [0]


def test_the_current_device_is_synchronized_before_the_exit(monkeypatch, in_stub):
    cupy, calls = fake_cupy(context=1)
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    stub.finalize_instance()
    assert calls == ["ctxGetCurrent", "deviceSynchronize"] and in_stub == [0]


def test_a_process_that_never_used_the_gpu_ends_without_creating_a_context(monkeypatch, in_stub):
    for cupy, calls in (fake_cupy(context=0), fake_cupy(ctx_error=FakeCudaError("not initialized"))):
        monkeypatch.setitem(sys.modules, "cupy", cupy)
        stub.finalize_instance()
        assert calls == ["ctxGetCurrent"]
    assert in_stub == [0, 0]


@pytest.mark.parametrize("error", [FakeCudaError("700"), RuntimeError("no driver")])
def test_a_failed_synchronize_ends_the_usual_way(monkeypatch, in_stub, caplog, error):
    cupy, _ = fake_cupy(sync_error=error)
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    with caplog.at_level(logging.WARNING, logger="tritonprep"):
        stub.finalize_instance()
    assert in_stub == [] and "did not synchronize" in caplog.text


def test_a_poisoned_context_ends_the_usual_way(monkeypatch, in_stub):
    monkeypatch.setattr(cuda, "_POISONED", {0})
    stub.finalize_instance(lambda: None)
    assert in_stub == [] and not cuda.process_ending()


def test_a_failed_release_reaches_triton_and_the_stub_ends_the_usual_way(in_stub):
    def broken() -> None:
        raise RuntimeError("decoder would not close")

    with pytest.raises(RuntimeError, match="decoder would not close"):
        stub.finalize_instance(broken)
    assert in_stub == []


def test_records_on_stderr_keep_tritons_line_format():
    record = logging.LogRecord("tritonprep.executors.gpu", logging.INFO, "gpu.py", 426, "idle in %.2f s", (0.0,), None)
    line = stub.StderrTritonFormatter().format(record)
    assert line.startswith("I") and line.endswith('gpu.py:426] "tritonprep.executors.gpu: idle in 0.00 s"'), line
