"""Library pieces of per-request isolation that run without Triton: fault injection, error detaching."""

from __future__ import annotations

import gc
import time
import weakref

import numpy as np
import pytest

from tritonprep.errors import DecodeError, InstanceFailed
from tritonprep.executors.cpu import CpuExecutor
from tritonprep.spec import OutputSpec
from tritonprep.triton import faults
from tritonprep.triton.responses import detach_errors


@pytest.fixture(scope="module")
def executor():
    ex = CpuExecutor(OutputSpec())
    yield ex
    ex.close()


def test_detached_errors_free_the_batch_without_the_garbage_collector(executor, jpegs):
    """The output batch must be freed by reference counting alone once the result is dropped."""
    gc.disable()
    try:
        res = executor.run([jpegs["chelsea"], b"\xff\xd8\xff\xe0 not a jpeg", jpegs["coffee"][:500]])
        assert set(res.errors) == {1, 2} and all(e.__traceback__ is not None for e in res.errors.values())
        out = weakref.ref(res.output)
        detach_errors(res.errors)
        assert all(e.__traceback__ is None and e.__context__ is None for e in res.errors.values())
        assert "truncated" in str(res.errors[2]) or "corrupt" in str(res.errors[2])  # the message survives
        del res
        assert out() is None
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
