"""The GPU memory budget's served copy of a repository, served by a real tritonserver on the CPU: the planner
is given a fake GPU (its total memory) in this process, where the launcher plans. Triton accepts the copy
(a folder per model with the rewritten config and links to the original version folders), the chosen
instance count and buckets are what the model loads with, paths built from ``args["model_repository"]``
resolve (the model's own version folder, a sibling model's files), the real repository serves through a
copy, and a budget that cannot fit refuses before anything starts. The real GPU: tests/gpu/test_gpu_launcher.py."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from tritonprep.errors import ServerError
from tritonprep.launcher import install, process
from tritonprep.launcher.install import GpuInfo
from tritonprep_testkit.servers import MODEL_REPOSITORY, local_options, running_server

pytestmark = pytest.mark.e2e

MODELS = Path(__file__).resolve().parent / "budget_models"


@pytest.fixture
def fake_gpu(monkeypatch: pytest.MonkeyPatch):
    """The launcher sees a GPU of ``total_mb`` MiB for its budget (the server still runs on the CPU)."""

    def set_total(total_mb: int) -> None:
        monkeypatch.setattr(install, "gpu_info", lambda ids: [GpuInfo("0", "GPU-fake", "Fake GPU", total_mb, 0)])

    return set_total


def probe(server: process.EmbeddedServer) -> dict[str, object]:
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(server.options.grpc_url)
    try:
        inp = grpcclient.InferInput("IN", [1], "FP32")
        inp.set_data_from_numpy(np.zeros(1, np.float32))
        return json.loads(client.infer("probe", [inp]).as_numpy("OUT")[0])
    finally:
        client.close()


@pytest.mark.parametrize(
    ("budget", "total_mb", "count", "buckets", "mb"),
    [
        ("auto", 5112, 2, "1,8,32,64", "1000"),  # 4600 MiB: tritonserver 2536 (its pool 1536) + 2 x 1000
        ("3212M", 8000, 1, "1,8,32", "600"),  # 676 MiB left: one instance at bucket 64 does not fit; at 32 it does
    ],
)
def test_the_chosen_counts_and_buckets_are_what_the_model_loads_with(
    tmp_path, fake_gpu, budget, total_mb, count, buckets, mb
):
    fake_gpu(total_mb)
    with running_server(tmp_path / "tritonserver.log", repository=MODELS, gpu_memory_budget=budget) as (server, _):
        assert server.plan is not None and [c.model for c in server.plan.choices] == ["probe"]
        answer = probe(server)
        config = server.model_config("probe")
        found = re.search(r"model_repository_path\[0\]\s+\|\s+(\S+)", server.log_path.read_text())  # type: ignore[union-attr]
        served = Path(found[1])  # type: ignore[index]
    assert answer["count"] == count and config["instance_group"][0]["count"] == count  # type: ignore[index]
    assert answer["parameters"] == {"batch_buckets": buckets, "gpu_memory_mb": mb}
    assert answer["own_file"] == "probe\n" and answer["sibling_file"] == "sibling\n"
    assert served.name == "repository" and served.parent.name.startswith("tritonprep-server-")
    assert not served.exists()  # the work folder went with the server


def test_the_real_repository_serves_through_its_copy(tmp_path, fake_gpu, jpegs):
    """Every shipped model loads from the served copy (the CPU configs: each model that declares gpu_memory_mb
    gets its rewritten config, the rest is linked) and classify_fused still finds the classifier's network
    beside it."""
    fake_gpu(80000)
    with running_server(tmp_path / "tritonserver.log", gpu_memory_budget="auto") as (server, _):
        assert server.plan is not None
        assert [c.model for c in server.plan.choices] == ["classifier", "classify_fused", "embedder", "preprocess"]
        assert not any(c.changed for c in server.plan.choices), server.plan.describe()
        assert all(server.model_states().values())
        import tritonclient.grpc as grpcclient

        client = grpcclient.InferenceServerClient(server.options.grpc_url)
        inp = grpcclient.InferInput("IMAGE", [1, 1], "BYTES")
        inp.set_data_from_numpy(np.array([[jpegs["chelsea"]]], dtype=np.object_))
        assert client.infer("classify_fused", [inp]).as_numpy("CLASS_IDS").shape == (1, 5)
        client.close()
        text = server.log_path.read_text()
    assert f"model_repository_path[0]         | {MODEL_REPOSITORY}" not in text
    assert re.search(r"model_repository_path\[0\]\s+\|\s+/\S+/tritonprep-server-\S+/repository", text)


def test_a_budget_that_cannot_fit_refuses_before_anything_starts(tmp_path, fake_gpu, monkeypatch):
    fake_gpu(8000)
    monkeypatch.setattr(process.tempfile, "tempdir", str(tmp_path))
    server = process.EmbeddedServer(local_options(MODELS, gpu_memory_budget="1800M"), tmp_path / "server.log")
    with pytest.raises(ServerError, match=r"cannot hold one instance of each GPU model.*probe 1x600 MiB"):
        server.start()
    assert server.watchdog is None and not (tmp_path / "server.log").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("tritonprep-server-")] == []


def test_budget_off_serves_the_configs_as_they_are(tmp_path, fake_gpu):
    fake_gpu(4600)
    with running_server(tmp_path / "tritonserver.log", repository=MODELS, gpu_memory_budget="off") as (server, _):
        assert server.plan is None
        answer = probe(server)
    assert answer["count"] == 3
    assert answer["parameters"] == {"batch_buckets": "1,8,32,64", "gpu_memory_mb": "64:1000,32:600"}
