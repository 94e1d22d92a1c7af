"""Faults against real tritonserver processes: an injected fault in every branch of preprocess
(under a client deadline), a killed stub, an instance that fails itself, and SIGTERM with
requests in flight. The figures come from scripts/faults.py, which prints them for humans. Every server here runs
on the CPU, on a GPU host too: the checks read the CPU server (one instance each, its messages); the GPU's faults
are tests/gpu/test_gpu_faults.py's."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from tritonprep.triton import faults
from tritonprep_client import images_array
from tritonprep_testkit.faults import OUTAGE_ANSWERS, break_and_recover, drain, quick_settings
from tritonprep_testkit.loadgen import GrpcSender
from tritonprep_testkit.servers import running_server

pytestmark = pytest.mark.e2e

DEADLINE_S = 20.0


@pytest.fixture(scope="module")
def faulty(tmp_path_factory: pytest.TempPathFactory):
    """A supervised server with fault injection on (its own; the shared one never has it), on the CPU even on a GPU
    host: these checks read the CPU server (one instance each, its messages); tests/gpu has the GPU's faults."""
    log = tmp_path_factory.mktemp("faulty") / "tritonserver.log"
    with running_server(log, supervise=True, env={faults.ENV: "1"}, gpus=()) as (server, supervisor):
        yield server, supervisor


def raw_infer(url: str, model: str, name: str, array: np.ndarray, datatype: str):
    """One request with any input name and type; returns the output array or the exception."""
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    client = grpcclient.InferenceServerClient(url)
    inp = grpcclient.InferInput(name, list(array.shape), datatype)
    inp.set_data_from_numpy(array)
    try:
        return client.infer(model, [inp], client_timeout=DEADLINE_S).as_numpy("PIXELS")
    except InferenceServerException as e:
        return e
    finally:
        client.close()


def test_a_fault_in_each_branch_fails_only_its_own_request(faulty, jpegs):
    """Every branch at once, in concurrent requests that share dynamic batches, each under a client
    deadline: the faulty request gets its error, every good request its tensor, none waits forever."""
    server, supervisor = faulty
    url = server.options.grpc_url
    good = jpegs["chelsea"]
    slow = faults.trigger("sleep:0.5", good)  # holds the instance so that the others queue up into one batch
    cases = {
        "slow-but-good": ("IMAGE", images_array([slow]), "BYTES", None),
        "executor-raises": ("IMAGE", images_array([faults.trigger("raise")]), "BYTES", "InjectedFault"),
        "too-many-images": ("IMAGE", images_array([good] * 65), "BYTES", "max_images_per_request=64"),
        "bad-image": ("IMAGE", images_array([good, b"\x89PNG\r\n\x1a\n broken"]), "BYTES", "image 2 of 2"),
        "wrong-dtype": ("IMAGE", np.zeros((1, 1), np.int32), "INT32", "data-type"),
        "missing-input": ("PICTURE", images_array([good]), "BYTES", "PICTURE"),
    }
    for i in range(8):
        cases[f"good-{i}"] = ("IMAGE", images_array([good, jpegs["coffee"]][: 1 + i % 2]), "BYTES", None)
    results: dict[str, object] = {}

    def call(name: str) -> None:
        input_name, array, dtype, _ = cases[name]
        results[name] = raw_infer(url, "preprocess", input_name, array, dtype)

    for _ in range(2):  # the second round runs the retry path after a first fault, in a warm batcher
        results.clear()
        first = threading.Thread(target=call, args=("slow-but-good",))
        first.start()
        threads = [threading.Thread(target=call, args=(n,)) for n in cases if n != "slow-but-good"]
        for t in threads:
            t.start()
        for t in [first, *threads]:
            t.join(DEADLINE_S + 5)
        assert set(results) == set(cases), "a request got no answer"
        reference = raw_infer(url, "preprocess", "IMAGE", images_array([good, jpegs["coffee"]]), "BYTES")
        for name, (_, array, _, needle) in cases.items():
            got = results[name]
            if needle is None:
                assert isinstance(got, np.ndarray), f"{name}: {got}"
                assert len(got) == len(array)  # PIXELS as the config makes it (NHWC FP16 on a GPU)
                np.testing.assert_array_equal(got, reference[: len(array)], err_msg=name)
            else:
                assert not isinstance(got, np.ndarray), name
                assert needle in str(got.message()), (name, got.message())
                assert "DEADLINE" not in str(got.status()), name
    log = server.log_path.read_text()
    assert "retrying each request alone" in log  # the raise shared a batch with good requests
    retry = log[log.index("retrying each request alone") :]
    assert "Traceback (most recent call last)" in retry and "InjectedFault" in retry  # the log shows where it failed
    assert supervisor.restarts == 0 and server.is_ready()


def test_fail_instance_answers_its_batch_then_the_server_restarts(tmp_path):
    figures = break_and_recover("fail-instance", quick_settings("fail-instance"), tmp_path, cpu=True)
    assert figures["trigger_request"] == "instance-failed"
    failure = next(detail for kind, _, detail in figures["supervisor_events"] if kind == "failure")
    assert failure.startswith("an unrecoverable error took instance preprocess"), failure  # its fault report
    assert figures["restarts"] == 1 and figures["ready_at_end"]
    assert figures["client_threads_hung"] == 0
    assert figures["requests_succeed_again_after_s"] is not None and figures["requests_succeed_again_after_s"] < 60
    assert set(figures["after_recovery"]) == {"ok"}
    assert set(figures["during_outage"]) <= OUTAGE_ANSWERS, figures
    assert figures["outage_latency_p99_s"] < 5.0, figures


def test_killed_stub_under_load_is_restarted(tmp_path):
    """kill -9 of the preprocess stub: the supervisor notices within a second, restarts the server,
    and requests succeed again; requests inside the dead stub get an error, not silence."""
    figures = break_and_recover("kill-stub", quick_settings("kill-stub"), tmp_path, cpu=True)
    assert figures["detected_after_s"] is not None and figures["detected_after_s"] < 2.0
    assert figures["restarts"] == 1 and figures["ready_at_end"]
    assert figures["requests_succeed_again_after_s"] is not None and figures["requests_succeed_again_after_s"] < 60
    assert figures["client_threads_hung"] == 0
    assert sum(figures["in_preprocess_at_break"].values()) == 2
    assert "stub-dead" in figures["in_preprocess_at_break"], figures
    # the two slow requests share a batch or not (they arrive within the batcher's 1 ms or not): one
    # queued behind the other can be answered by its 2 s queue timeout instead, also an error in time
    assert set(figures["in_preprocess_at_break"]) <= {"stub-dead", "server-unavailable", "queue-timeout"}, figures
    assert figures["in_preprocess_answered_after_s"] < 10, figures
    assert set(figures["after_recovery"]) == {"ok"} and figures["after_recovery"]["ok"] > 3
    assert figures["outage_latency_p99_s"] < 5.0  # the outage fails fast


def test_sigterm_lets_in_flight_requests_finish(tmp_path):
    """`tritonprep serve` gets SIGTERM while ensemble requests sit in preprocess (one executing, three
    queued behind it): they complete. The holder's 1 s keeps the queued ones well inside preprocess's 2 s queue
    timeout on a busy 2-core machine (with 1.5 s one of them timed out once in a full run)."""
    figures = drain(quick_settings("drain", clients=4, sleep=1.0, exit_timeout=30), tmp_path, cpu=True)
    assert figures["in_preprocess_at_sigterm"] == 4, figures
    assert figures["in_flight_outcomes"] == {"ok": 4}, figures
    assert figures["launcher_exit_code"] == 0 and figures["clean_stop"], figures  # nothing for the watchdog to kill
    assert figures["launcher_exited_after_s"] < figures["exit_timeout_s"]


def test_supervisor_records_the_stubs(faulty):
    server, supervisor = faulty
    models = sorted(s.model for s in supervisor.stubs)
    # one stub per instance: one each on this machine (postprocess's four are the container's configs)
    assert models == ["classifier", "classify_fused", "embedder", "postprocess", "preprocess"]
    assert all(Path(f"/proc/{s.pid}").exists() for s in supervisor.stubs)
    assert supervisor.check() is None
    sender = GrpcSender(server.options.grpc_url)
    assert sender.send("classify", [b"junk"], "bad", 10).category == "rejected-input"
    sender.close()
