"""A model's finalize outside a Triton stub: it releases the instance and leaves the process alone."""

from __future__ import annotations

import logging

import pytest

from tritonprep import cuda
from tritonprep.triton import pb


@pytest.fixture(autouse=True)
def fresh_process(monkeypatch):
    """This process as a new one: no sticky error seen, no end announced (other tests poison it on purpose)."""
    monkeypatch.setattr(cuda, "_POISONED", set())
    monkeypatch.setattr(cuda, "_ENDING", [False])


def test_outside_a_stub_finalize_releases_and_returns(monkeypatch):
    closed = []
    assert not pb.in_stub_process()  # pytest's executable is Python
    pb.finalize_instance(lambda: closed.append(True))
    assert closed == [True] and not cuda.process_ending()


def test_a_stub_marks_its_end_before_closing_and_exits_after(monkeypatch):
    """In a stub, close() runs knowing that the process ends (it leaves memory to that end), then the stub
    exits with 0; the exit is the last step, after the log teardown."""
    monkeypatch.setattr(pb, "in_stub_process", lambda: True)
    steps = []
    monkeypatch.setattr(pb, "teardown_logging", lambda: steps.append("teardown"))
    monkeypatch.setattr(pb.os, "_exit", lambda code: steps.append(("exit", code)))
    pb.finalize_instance(lambda: steps.append(("close", cuda.process_ending())))
    assert steps == [("close", True), "teardown", ("exit", 0)]


def test_a_poisoned_context_ends_the_usual_way(monkeypatch):
    monkeypatch.setattr(pb, "in_stub_process", lambda: True)
    monkeypatch.setattr(cuda, "_POISONED", {0})
    monkeypatch.setattr(pb.os, "_exit", lambda code: pytest.fail("exited with a poisoned context"))
    pb.finalize_instance(lambda: None)
    assert not cuda.process_ending()


def test_a_failed_release_is_logged_before_the_stub_ends(monkeypatch, caplog):
    monkeypatch.setattr(pb, "in_stub_process", lambda: True)
    exits = []
    monkeypatch.setattr(pb.os, "_exit", exits.append)

    def broken() -> None:
        raise RuntimeError("decoder would not close")

    with caplog.at_level(logging.ERROR, logger="tritonprep"), pytest.raises(RuntimeError):
        pb.finalize_instance(broken)
    assert "releasing the instance failed" in caplog.text and exits == [0]
