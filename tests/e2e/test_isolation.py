"""Per-request isolation of every model built on ``RequestIsolation`` (the classifier, postprocess and
sink models), against a real tritonserver serving a small test model that fails on marked requests."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest

from tritonprep_testkit.servers import running_server

pytestmark = pytest.mark.e2e

MODELS = Path(__file__).resolve().parent / "models"


def test_a_bad_request_fails_alone_inside_a_shared_batch(tmp_path):
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    cases = {
        "good-a": [1.0, 2.0],
        "good-b": [3.0, 4.0],
        "unreadable": [999.0, 0.0],  # read() raises: INVALID_ARG for this request
        "fails-the-batch": [-1.0, 0.0],  # run() raises for the batch: each request is retried alone
        "unbuildable": [555.0, 0.0],  # respond() raises: this response alone fails
        "good-c": [5.0, 6.0],
    }
    results: dict[str, object] = {}
    with running_server(tmp_path / "tritonserver.log", repository=MODELS) as (server, _):
        client = grpcclient.InferenceServerClient(server.options.grpc_url)

        def call(name: str) -> None:
            x = np.array([cases[name]], np.float32)
            inp = grpcclient.InferInput("X", list(x.shape), "FP32")
            inp.set_data_from_numpy(x)
            try:
                results[name] = client.infer("isolate", [inp], client_timeout=30).as_numpy("Y")
            except InferenceServerException as e:
                results[name] = e

        threads = [threading.Thread(target=call, args=(n,)) for n in cases]
        for t in threads:
            t.start()
        for t in threads:
            t.join(40)
        stats = client.get_inference_statistics("isolate", as_json=True, headers=server.grpc_admin_headers)
        client.close()
        log = server.log_path.read_text()

    assert set(results) == set(cases)
    for name in ("good-a", "good-b", "good-c"):  # the retry and the failed response cost them nothing
        np.testing.assert_array_equal(results[name], np.array([cases[name]], np.float32) * 2, err_msg=name)
    unreadable, failing = results["unreadable"], results["fails-the-batch"]
    assert isinstance(unreadable, InferenceServerException) and "INVALID_ARG" in str(unreadable.status())
    assert "marked unreadable" in unreadable.message()
    assert isinstance(failing, InferenceServerException) and "INTERNAL" in str(failing.status())
    assert "ValueError: negative input in a batch of 1" in failing.message()  # it failed alone, on its retry
    unbuildable = results["unbuildable"]
    assert isinstance(unbuildable, InferenceServerException) and "INTERNAL" in str(unbuildable.status())
    assert (
        "internal error building the response: ValueError: test: response marked unbuildable" in unbuildable.message()
    )
    executions = int(stats["model_stats"][0]["execution_count"])
    assert executions < len(cases), "the requests never shared a batch, so isolation inside a batch was not tested"
    assert "retrying each request alone" in log and "Traceback (most recent call last)" in log


def test_a_broken_instance_answers_every_request_then_its_stub_exits(tmp_path):
    """run() raises InstanceFailed (what a sticky CUDA error becomes): every request gets an error naming it,
    so does the next one, and the stub exits so that a supervisor restarts the server."""
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    from tritonprep.launcher.supervise import stub_processes

    with running_server(tmp_path / "tritonserver.log", repository=MODELS) as (server, _):
        client = grpcclient.InferenceServerClient(server.options.grpc_url)
        [stub] = [s for s in stub_processes(server.pid) if s.model == "isolate"]  # type: ignore[arg-type]

        def call(first: float) -> str:
            x = np.array([[first, 0.0]], np.float32)
            inp = grpcclient.InferInput("X", list(x.shape), "FP32")
            inp.set_data_from_numpy(x)
            try:
                client.infer("isolate", [inp], client_timeout=30)
            except InferenceServerException as e:
                return e.message()
            return "ok"

        assert call(1.0) == "ok"
        first = call(777.0)
        then = call(1.0)  # a healthy request, after the instance broke
        deadline = time.monotonic() + 10
        while stub.pid in {s.pid for s in stub_processes(server.pid)} and time.monotonic() < deadline:  # type: ignore[arg-type]
            time.sleep(0.1)
        stub_gone = stub.pid not in {s.pid for s in stub_processes(server.pid)}  # type: ignore[arg-type]
        client.close()
    assert "isolate instance is out of service (test: marked broken (777))" in first
    assert "out of service" in then or "Stub process" in then, then
    assert stub_gone
