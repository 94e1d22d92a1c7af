"""Library pieces of per-request isolation that run without Triton: fault injection, error detaching."""

from __future__ import annotations

import gc
import time
import weakref

import numpy as np
import pytest

from tritonprep.errors import DecodeError, InstanceFailed, detach_errors
from tritonprep.executors.base import BatchResult
from tritonprep.executors.cpu import CpuExecutor
from tritonprep.spec import OutputSpec
from tritonprep.triton import faults


@pytest.fixture(scope="module")
def executor():
    ex = CpuExecutor(OutputSpec())
    yield ex
    ex.close()


def test_detach_errors_drops_tracebacks_and_chained_errors_and_keeps_the_message():
    errors = {}
    try:
        raise DecodeError("cannot decode the JPEG data") from KeyError("inner")
    except DecodeError as e:
        errors[0] = e
    try:
        raise KeyError("inner")
    except KeyError:
        errors[1] = DecodeError("truncated")
        try:
            raise errors[1]
        except DecodeError:
            pass
    assert all(e.__traceback__ is not None for e in errors.values())
    assert errors[0].__cause__ is not None and errors[1].__context__ is not None
    detach_errors(errors)
    for e in errors.values():
        assert e.__traceback__ is None and e.__context__ is None and e.__cause__ is None
    assert [str(e) for e in errors.values()] == ["cannot decode the JPEG data", "truncated"]


def test_a_batch_result_holds_its_errors_detached():
    try:
        raise DecodeError("corrupt")
    except DecodeError as e:
        error = e
    assert error.__traceback__ is not None
    res = BatchResult({}, {3: error})
    assert res.errors[3] is error and error.__traceback__ is None and str(error) == "corrupt"


def test_a_closed_executor_and_its_batch_go_without_the_garbage_collector(jpegs):
    """Reference counting alone must free the output batch and the closed executor once the result is dropped: the
    executor's errors come without the tracebacks whose frames would hold both in a reference cycle (on the GPU, a
    closed executor freed later by the collector crashed the process)."""
    gc.disable()
    try:
        ex = CpuExecutor(OutputSpec())
        res = ex.run([jpegs["chelsea"], b"\xff\xd8\xff\xe0 not a jpeg", jpegs["coffee"][:500]])
        ex.close()  # its threads joined: none still holds a task's arguments
        assert set(res.errors) == {1, 2}
        assert all(e.__traceback__ is None and e.__context__ is None for e in res.errors.values())
        assert "truncated" in str(res.errors[2]) or "corrupt" in str(res.errors[2])  # the message survives
        out, executor = weakref.ref(res.output), weakref.ref(ex)
        del res, ex
        assert out() is None and executor() is None
    finally:
        gc.enable()


def test_fault_injection_is_off_by_default(monkeypatch):
    monkeypatch.delenv(faults.ENV, raising=False)
    assert not faults.enabled()
    monkeypatch.setenv(faults.ENV, "1")
    assert faults.enabled()


def test_trigger_images_act_then_carry_a_real_image(executor, jpegs):
    ex = faults.FaultyExecutor(executor)
    with pytest.raises(faults.InjectedFault):
        ex.run([jpegs["chelsea"], faults.trigger("raise")])
    with pytest.raises(InstanceFailed, match="unrecoverable"):
        ex.run([faults.trigger("fail-instance", jpegs["chelsea"])])
    t0 = time.monotonic()
    executor.run([jpegs["chelsea"], jpegs["coffee"]])
    plain_s = time.monotonic() - t0
    start = time.monotonic()
    res = ex.run([faults.trigger("sleep:0.5", jpegs["chelsea"]), faults.trigger("sleep:0.5"), jpegs["coffee"]])
    elapsed = time.monotonic() - start
    # one sleep per batch, not one per request: two sleeps would take >= 1.0 s + the images' own time
    assert 0.5 <= elapsed < 0.5 + plain_s + 0.4, (elapsed, plain_s)
    assert set(res.errors) == {1} and isinstance(res.errors[1], DecodeError)  # an empty payload is an empty image
    plain = executor.run([jpegs["chelsea"]])
    np.testing.assert_array_equal(res.output[0], plain.output[0])


def test_without_injection_a_trigger_is_just_garbage(executor):
    res = executor.run([faults.trigger("raise")])
    assert isinstance(res.errors[0], DecodeError) and "signature" in str(res.errors[0])
