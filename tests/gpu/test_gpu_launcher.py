"""The launcher on a GPU, on every GPU of the machine (a server per GPU): the real private CUDA MPS daemon of each
GPU's server, the GPU memory budget on the shipped GPU configs per GPU, the start-up summary, and a clean stop
(exit code 0 within stop_bound(), one GPU's: the servers stop at once; nothing left for the watchdogs to kill, the
MPS daemons quit when asked).

Prints what it measured (``pytest -rP``): the stop's duration, GPU memory in use against the budget, the lines
of the log that report a problem.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tritonprep.errors import ServerError
from tritonprep.launcher import mps, proctable
from tritonprep.launcher.budget import TRITON_MB
from tritonprep.launcher.host import Host
from tritonprep.launcher.served import demand_of, read_models
from tritonprep.launcher.supervise import stub_processes
from tritonprep_testkit.leftovers import mps_of_host
from tritonprep_testkit.servers import (
    MODEL_REPOSITORY,
    local_options,
    running_host,
    serve_command,
    serve_until_ready_then_stop,
)

#: a stop with nothing in flight takes at most this long, plus UNLOAD_S per instance beyond the first of the
#: model with the most instances (Triton 2.51's Python backend finalizes a model's instances one after
#: another, sleeping 1 s in each: python_backend src/python_be.cc, ~ModelInstanceState); each stub then
#: waits for its GPU and ends itself (tritonprep.triton.stub): 1.28-1.71 s an instance on the H100, the same
#: bound as test_gpu_lifecycle's UNLOAD_S_PER_INSTANCE (reports/2026-11-25-h100-stage5)
STOP_S, UNLOAD_S = 5.0, 2.0


def stop_bound(config_name: str | None = "gpu") -> float:
    counts = [sum(g.count for g in m.config.instance_group) for m in read_models(MODEL_REPOSITORY, config_name)]
    return STOP_S + UNLOAD_S * (max(counts, default=1) - 1)


PROBLEM = re.compile(r"^[EW]\d{4} |\b(?:WARNING|ERROR)\b[:]")


@pytest.fixture
def gpu_server_kit(cp, nvimgcodec):
    if importlib.util.find_spec("pytriton") is None:
        pytest.skip("the embedded server (nvidia-pytriton) is not installed here")
    before = {p.pid for p in mps_of_host()}
    yield
    left = [f"{p.pid} {p.name}" for p in mps_of_host() if p.pid not in before]
    assert left == [], f"MPS processes of the test's servers outlived them: {left}"


def classify(url: str, jpeg: bytes) -> tuple[int, ...]:
    import numpy as np
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(url)
    try:
        inp = grpcclient.InferInput("IMAGE", [1, 1], "BYTES")
        inp.set_data_from_numpy(np.array([[jpeg]], dtype=np.object_))
        return tuple(client.infer("classify", [inp]).as_numpy("CLASS_IDS").shape)
    finally:
        client.close()


def test_mps_on_serves_every_gpu_instance_through_a_private_daemon_and_stops_cleanly(
    gpu_server_kit, tmp_path, jpegs, topology
):
    """Each GPU's server has its own MPS daemon (its pipe folder in its own work folder), every GPU instance of
    that server is a client of that daemon's MPS server, and the host stops within one GPU's stop bound (the
    servers stop at once)."""
    with running_host(tmp_path / "tritonserver.log", mps="on") as host:
        assert len(host.parts) == topology.count
        pipes = set()
        for part in host.parts:
            server = part.server
            assert server.mps is not None and server.mps.enabled, server.mps
            pipe = Path(server.mps.detail)
            work = pipe.parents[1]
            assert pipe == work / "mps" / "pipe" and work.name.startswith("tritonprep-server-")
            assert {p.name for p in mps.mps_processes(work)} == {mps.CONTROL, mps.SERVER}
            [mps_server] = [int(w) for w in mps.control(pipe, ["get_server_list"], os.environ).split()]
            clients = {int(w) for w in mps.control(pipe, [f"get_client_list {mps_server}"], os.environ).split()}
            stubs = stub_processes(server.pid)  # type: ignore[arg-type]
            for stub in stubs:
                env = proctable.environ(stub.pid) or {}
                assert env.get(mps.PIPE_ENV) == str(pipe) and "CUDA_VISIBLE_DEVICES" not in env, stub
            gpu_stubs = {s.pid for s in stubs if s.model != "postprocess"}
            assert gpu_stubs <= clients, (gpu_stubs, clients)  # every GPU instance is a client of its MPS server
            pipes.add(pipe)
        assert len(pipes) == topology.count  # a daemon per GPU
        assert classify(host.options.grpc_url, jpegs["chelsea"]) == (1, 5)
        start = time.monotonic()
        code = host.stop()
        stop_s = time.monotonic() - start
    bound = stop_bound() * (1.2 if topology.count > 1 else 1)
    seen = f"stop of {topology.count} GPU server(s) under MPS, nothing in flight: {stop_s:.2f} s (bound {bound:.1f} s)"
    print(f"{seen}; {host.cleanups}")  # noqa: T201
    assert code == 0 and stop_s <= bound, (code, stop_s)
    for part in host.parts:
        cleanup = part.server.cleanup
        assert cleanup is not None and cleanup.nothing_killed and cleanup.mps == "quit", cleanup
    assert all(mps.mps_processes(p.parents[1]) == [] and not p.parents[1].exists() for p in pipes)


def test_serve_on_the_gpu_logs_its_summary_and_stops_cleanly(gpu_server_kit, tmp_path, topology):
    """`tritonprep serve` with its defaults (MPS auto, budget auto, the GPU configs, a server per GPU): the summary
    names each GPU, MPS and the budget; SIGTERM with nothing in flight stops it within stop_bound() (one GPU's:
    the servers stop at once) with exit code 0 and nothing left to kill; the log has no warning or error line."""
    log_file = tmp_path / "serve.log"
    run = serve_until_ready_then_stop(serve_command(log_file).argv, ready_timeout_s=600, stop_timeout_s=120)
    text, code, stop_s = run.text, run.code, run.stop_s
    found = [line for line in (log_file.read_text() + text).splitlines() if PROBLEM.search(line)]
    bound = stop_bound() * (1.2 if topology.count > 1 else 1)  # several GPUs: at most 1.2x one GPU's (issue 35)
    sys.stdout.write(f"{text}\nstop with nothing in flight: {stop_s:.2f} s (bound {bound:.1f} s)\n")
    sys.stdout.write(f"problem lines: {found}\n")
    if topology.count == 1:
        assert re.search(r"GPU 0: .+, \d+ MiB \(\d+ MiB in use\)", text), text
        assert "CUDA MPS: on (" in text
    else:  # a line per GPU: its own server, MPS daemon and metrics port
        assert f"{topology.count} tritonservers, one per GPU" in text, text
        for slot in topology.slots:
            pattern = rf"GPU {slot.gpus[0]}: .+, \d+ MiB \(\d+ MiB in use\); tritonserver pid \d+, CUDA MPS on, metrics"
            assert re.search(pattern, text), (pattern, text)
    assert re.search(r"GPU memory budget \d+ MiB per GPU: \d+ MiB planned", text), text
    assert re.search(r"admission: CUDA pool \d+ MiB per GPU holds \d+ images between steps .+ classifier \d+", text)
    assert re.search(r"^\s+preprocess\s+GPU\s+4\s", text, re.M), text  # instances per GPU
    assert code == 0 and stop_s <= bound, (code, stop_s)
    assert re.search(r"tritonserver stopped \(exit code 0\) after [\d.]+ s; nothing left to kill", text), text
    assert found == []


def test_a_budget_lowers_the_gpu_configs_counts_and_refuses_what_cannot_fit(gpu_server_kit, tmp_path, jpegs):
    """The budget applies to each GPU's server: every GPU's plan gives one instance of each GPU model."""
    # one instance of each GPU model at its largest bucket (as the shipped GPU configs declare), 300 MiB to spare
    demands = [d for d in map(demand_of, read_models(MODEL_REPOSITORY, "gpu")) if d is not None]
    one_each = TRITON_MB + 512 + sum(d.per_instance(d.steps()[0]) for d in demands)
    budget = f"{one_each + 300}M"
    with running_host(tmp_path / "tritonserver.log", gpu_memory_budget=budget) as host:
        for part in host.parts:
            plan = part.server.plan
            assert plan is not None
            counts = {c.model: c.count for c in plan.choices}
            assert counts == dict.fromkeys(["classifier", "classify_fused", "embedder", "preprocess"], 1), counts
        for model in counts:
            config = host.model_config(model)
            assert config is not None and config["instance_group"][0]["count"] == 1, (model, config)
        assert classify(host.options.grpc_url, jpegs["chelsea"]) == (1, 5)
        used = subprocess.run(
            ["nvidia-smi", "--query-gpu=index,memory.used", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        print(f"GPU memory in use (index, MiB): {used} under a budget of {budget} per GPU")  # noqa: T201
    host = Host(local_options(gpu_memory_budget="4000M"), tmp_path / "refused.log")
    with pytest.raises(ServerError, match="cannot hold one instance of each GPU model"):
        host.start()
    assert all(s.watchdog is None for s in host.servers) and not (tmp_path / "refused.log").exists()


def path_without_mps(shadow: Path) -> str:
    """This PATH without the MPS binaries: a folder that holds them is replaced by ``shadow``, which links
    everything else of it (the Python stub is started through ``bash``, which may live beside them)."""
    shadow.mkdir()
    folders = [str(Path(sys.executable).parent)]
    for entry in os.environ.get("PATH", "").split(os.pathsep):
        folder = Path(entry)
        if not entry or not folder.is_dir():
            continue
        if not (folder / mps.CONTROL).exists():
            folders.append(entry)
            continue
        for f in folder.iterdir():
            if f.name not in (mps.CONTROL, mps.SERVER) and not (shadow / f.name).exists():
                (shadow / f.name).symlink_to(f)
        folders.append(str(shadow))
    path = os.pathsep.join(dict.fromkeys(folders))
    assert shutil.which(mps.CONTROL, path=path) is None and shutil.which("bash", path=path) is not None
    return path


def test_mps_that_cannot_start_serves_without_it_or_fails_when_asked_for(gpu_server_kit, tmp_path):
    env = {"PATH": path_without_mps(tmp_path / "no-mps-here")}  # bash and the rest, but no nvidia-cuda-mps-control
    with running_host(tmp_path / "auto.log", env=env, mps="auto") as host:
        for server in host.servers:
            assert server.mps is not None and not server.mps.enabled
            assert "nvidia-cuda-mps-control is not installed" in server.mps.detail
    host = Host(local_options(env=tuple(env.items()), mps="on"), tmp_path / "on.log")
    with pytest.raises(ServerError, match=r"--mps on: MPS cannot start: nvidia-cuda-mps-control is not installed"):
        host.start()
    assert all(s.watchdog is None for s in host.servers)
