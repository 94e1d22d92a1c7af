"""A network model's load warms the GPU work of its first requests (tritonprep.pipeline.networks): the embedder's
unit-length step runs once on an image of zeros while the model loads, so that CuPy's kernels are compiled before
the server is ready, not behind the first requests' queue timeouts. A GPU instance becomes the MPS client its config
asks for before its runtime loads. The runtime here is a stand-in (no GPU)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from tritonprep.errors import ConfigError
from tritonprep.pipeline import networks


class Runtime:
    """A network runtime: records the batches it runs, answers vectors of length 2."""

    name = "stand-in"

    def __init__(self, on_gpu: bool) -> None:
        self.on_gpu, self.timings, self.batches = on_gpu, {}, []

    def infer(self, batch: np.ndarray) -> np.ndarray:
        self.batches.append((batch.shape, batch.dtype))
        return np.full((len(batch), 4), 1.0, np.float32)

    def infer_many(self, parts: list[np.ndarray], then: object = None) -> np.ndarray:
        return self.infer(np.concatenate(parts))

    def close(self) -> None:
        pass


@pytest.mark.parametrize("dtype", [np.dtype(np.float32), np.dtype(np.float16)])
def test_a_gpu_embedder_runs_its_unit_length_step_once_while_loading(dtype):
    runtime = Runtime(on_gpu=True)
    networks.warm_embeddings(runtime, (224, 224, 3), dtype)
    assert runtime.batches == [((1, 224, 224, 3), np.float32)]
    assert runtime.timings["embed_warm"] >= 0


def test_a_cpu_embedder_has_nothing_to_warm():
    runtime = Runtime(on_gpu=False)
    networks.warm_embeddings(runtime, (3, 224, 224), np.dtype(np.float32))
    assert runtime.batches == [] and "embed_warm" not in runtime.timings


def test_load_network_warms_the_embedder_before_it_reports_the_load(monkeypatch):
    runtime = Runtime(on_gpu=True)
    reported: list[dict] = []
    monkeypatch.setattr(networks, "load_runtime", lambda *a, **k: runtime)
    monkeypatch.setattr(networks, "report_loaded", lambda args, **k: reported.append(dict(k["timings"])))
    config = {"max_batch_size": 256, "input": [{"dims": [224, 224, 3]}], "parameters": {}}
    args = {
        "model_name": "embedder",
        "model_instance_name": "embedder_0_0",
        "model_instance_device_id": "0",
        "model_instance_kind": "GPU",
    }
    assert networks.load_network(args, config, None, embeddings=np.dtype(np.float16)) is runtime
    assert runtime.batches == [((1, 224, 224, 3), np.float32)]
    assert "embed_warm" in reported[0]  # the load's report includes the warm-up


def test_load_network_makes_a_gpu_instance_an_mps_client_before_its_runtime_loads(monkeypatch):
    from tritonprep.cuda import MPS_PRIORITY_ENV, MPS_THREADS_ENV

    monkeypatch.delenv(MPS_PRIORITY_ENV, raising=False)
    monkeypatch.setenv(MPS_THREADS_ENV, "75")  # the server's own: a model that sets none keeps it
    seen: list[tuple] = []

    def load_runtime(*a, **k):  # where the runtime would create its CUDA context
        seen.append((os.environ.get(MPS_PRIORITY_ENV), os.environ.get(MPS_THREADS_ENV), k["options"]))
        return Runtime(on_gpu=True)

    monkeypatch.setattr(networks, "load_runtime", load_runtime)
    monkeypatch.setattr(networks, "report_loaded", lambda args, **k: None)
    params = {"mps_client_priority": {"string_value": "1"}, "batch_buckets": {"string_value": "8,64"}}
    config = {"max_batch_size": 64, "input": [{"dims": [224, 224, 3]}], "parameters": params}
    args = {
        "model_name": "classifier",
        "model_instance_name": "classifier_0_0",
        "model_instance_device_id": "0",
        "model_instance_kind": "GPU",
    }
    networks.load_network(args, config, None)
    ((priority, share, options),) = seen
    assert (priority, share) == ("1", "75")  # set before the load; the unset share left as the server's
    assert options.batch_buckets == (8, 64)  # the MPS parameters are the model's, not the runtime's
    bad = {**config, "parameters": {"mps_client_priority": {"string_value": "2"}}}
    with pytest.raises(ConfigError, match="mps_client_priority must be 0"):
        networks.load_network(args, bad, None)


def test_load_network_hands_the_runtime_the_servers_ready_mark_to_wait_for(tmp_path, monkeypatch):
    """Under the launcher the late buckets wait for the server's ready mark; without it, for nothing."""
    from tritonprep import reports

    given: list = []
    monkeypatch.setattr(networks, "load_runtime", lambda *a, **k: given.append(k["late_start"]) or Runtime(True))
    monkeypatch.setattr(networks, "report_loaded", lambda args, **k: None)
    config = {"max_batch_size": 64, "input": [{"dims": [224, 224, 3]}], "parameters": {}}
    args = {"model_name": "classifier", "model_instance_name": "classifier_0_0", "model_instance_device_id": "0",
            "model_instance_kind": "GPU"}  # fmt: skip
    monkeypatch.delenv(reports.ENV, raising=False)
    networks.load_network(args, config, None)
    monkeypatch.setenv(reports.ENV, str(tmp_path))
    networks.load_network(args, config, None)
    assert given[0] is None and callable(given[1]) and not given[1]()
    reports.mark_server_ready(tmp_path)
    assert given[1]()
