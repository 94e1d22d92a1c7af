"""The multi-GPU host's parts that need no server: the topology from fake device lists, the host endpoint's merged
metrics and health, the port check, each server's options, the launcher's GPU numbering in the instances' reports,
the log filter's labels, tritonserver's shared-port flags, perf_analyzer split over processes, and the report's
GPU-count goals."""

from __future__ import annotations

import json
import os
import socket
import stat
import sys

import pytest

from tritonprep import reports
from tritonprep.errors import ServerError
from tritonprep.launcher import command, logfilter, topology
from tritonprep.launcher.front import GpuState, health, host_gauges, label_sample, merge_metrics
from tritonprep.launcher.host import Host, check_ports
from tritonprep.launcher.options import ServerOptions

SMI_TWO = "GPU 0: NVIDIA H100 (UUID: GPU-aaa)\nGPU 1: NVIDIA H100 (UUID: GPU-bbb)\n"


@pytest.fixture
def two_gpus(tmp_path, monkeypatch):
    """A machine that shows two GPUs (a fake nvidia-smi -L)."""
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text(f"#!/bin/sh\nprintf '{SMI_TWO}'\n")
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{smi.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv(topology.FAKE_ENV, raising=False)


def test_one_server_per_gpu_each_seeing_its_own(two_gpus, monkeypatch):
    t = topology.detect()
    assert [(s.gpus, s.devices, s.label) for s in t.slots] == [((0,), ("0",), "gpu0"), ((1,), ("1",), "gpu1")]
    assert t.shared_ports and t.gpu_count == 2
    assert topology.detect((1,)).slots == (topology.Slot((1,), ("1",), "gpu1"),)  # one GPU: one server, no sharing
    one = topology.detect(None, "one")
    assert one.count == 1 and one.slots[0].gpus == (0, 1) and not one.shared_ports
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,0")  # the launcher's numbers follow its own visible list
    assert [s.devices for s in topology.detect().slots] == [("1",), ("0",)]
    with pytest.raises(ServerError, match="this machine shows 2 GPU"):
        topology.detect((2,))
    with pytest.raises(ServerError, match="--servers must be one of"):
        topology.detect(None, "many")


def test_fake_gpus_stand_in_only_without_a_gpu(two_gpus, monkeypatch, tmp_path):
    monkeypatch.setenv(topology.FAKE_ENV, "3")
    assert topology.detect().count == 2  # real GPUs win
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no nvidia-smi: no GPU
    fakes = topology.detect()
    assert [s.label for s in fakes.slots] == ["gpu0", "gpu1", "gpu2"] and all(
        s.fake and not s.gpus for s in fakes.slots
    )
    assert topology.detect(None, "one").slots == (topology.Slot((), (), "cpu"),)
    monkeypatch.setenv(topology.FAKE_ENV, "lots")
    with pytest.raises(ServerError, match="expected a count of fake GPUs"):
        topology.detect()


def test_each_gpus_server_gets_the_shared_ports_its_metrics_port_and_its_id(two_gpus):
    host = Host(ServerOptions(http_port=9000, grpc_port=9001, metrics_port=9002, admin_key="k"))
    options = [s.options for s in host.servers]
    assert [o.gpus for o in options] == [(0,), (1,)] and [o.metrics_port for o in options] == [9003, 9004]
    assert all(o.reuse_ports and o.http_port == 9000 and o.grpc_port == 9001 for o in options)
    assert [o.server_id for o in options] == ["tritonprep-gpu0", "tritonprep-gpu1"]
    assert [o.log_label for o in options] == ["gpu0", "gpu1"] and {s.admin_key for s in host.servers} == {"k"}
    chosen = Host(ServerOptions(gpu_metrics_ports=(7001, 7005, 7009)))
    assert chosen.gpu_metrics_ports() == (7001, 7005)
    with pytest.raises(ServerError, match="1 GPU metrics port"):
        Host(ServerOptions(gpu_metrics_ports=(7001,)))
    single = Host(ServerOptions(gpus=(1,), metrics_port=9002))
    assert not single.shared and single.servers[0].options.gpus == (1,) and not single.servers[0].options.reuse_ports


def test_shared_ports_flags_and_ids_on_the_command_line(tmp_path):
    shared = ServerOptions(reuse_ports=True, server_id="tritonprep-gpu1")
    args = " ".join(command.tritonserver_args(shared, tmp_path, tmp_path, "k", 1))
    assert "--reuse-http-port true --reuse-grpc-port true" in args and "--id tritonprep-gpu1" in args
    assert f"--grpc-max-connection-age {command.MAX_CONNECTION_AGE_MS}" in args
    alone = " ".join(command.tritonserver_args(ServerOptions(), tmp_path, tmp_path, "k", 1))
    assert "reuse" not in alone and "--id" not in alone and "connection-age" not in alone


def test_a_port_another_process_listens_on_is_named():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        with pytest.raises(ServerError, match=rf"port {port} on 127\.0\.0\.1 is in use"):
            check_ports("127.0.0.1", [port])
    check_ports("127.0.0.1", [port])  # free again
    with pytest.raises(ServerError, match="must differ"):
        check_ports("127.0.0.1", [port, port])


def test_the_metrics_of_every_server_in_one_text_labelled_by_gpu():
    text = (
        "# HELP nv_inference_count Number of inferences\n# TYPE nv_inference_count counter\n"
        'nv_inference_count{model="classify",version="1"} 5\n'
        "# HELP nv_uptime Uptime\n# TYPE nv_uptime gauge\nnv_uptime 3.5\n"
    )
    merged = merge_metrics([("0", text), ("1", text.replace(" 5\n", " 7\n")), ("2", None)])
    lines = merged.splitlines()
    assert lines.count("# TYPE nv_inference_count counter") == 1 and lines.count("# TYPE nv_uptime gauge") == 1
    assert 'nv_inference_count{gpu="0",model="classify",version="1"} 5' in lines
    assert 'nv_inference_count{gpu="1",model="classify",version="1"} 7' in lines
    assert lines.index('nv_inference_count{gpu="1",model="classify",version="1"} 7') < lines.index(
        "# TYPE nv_uptime gauge"
    )
    assert 'nv_uptime{gpu="1"} 3.5' in lines
    assert label_sample('x{a="b",} 1 1700000000', "3") == 'x{gpu="3",a="b"} 1 1700000000'


def test_the_statistics_of_several_servers_add_up_per_batch_size():
    from tritonprep.launcher.front import merge_statistics

    def stats(n: int, size: int) -> dict:
        return {"model_stats": [{"name": "classify", "version": "1", "last_inference": 10 * n, "inference_count": n,
                "batch_stats": [{"batch_size": size, "compute_infer": {"count": n, "ns": 100 * n}}]}]}  # fmt: skip

    [merged] = merge_statistics([stats(2, 8), stats(3, 8), stats(4, 64)])["model_stats"]
    assert merged["inference_count"] == 9 and merged["last_inference"] == 40
    assert merged["batch_stats"] == [
        {"batch_size": 8, "compute_infer": {"count": 5, "ns": 500}},
        {"batch_size": 64, "compute_infer": {"count": 4, "ns": 400}},
    ]


def test_the_hosts_health_and_gauges():
    def states(*names: str) -> list[GpuState]:
        return [GpuState(str(k), s, 100 + k, f"http://h:{9003 + k}/metrics", k) for k, s in enumerate(names)]

    assert health(states("ready", "ready")) | {"gpus": []} == {
        "ready": True,
        "live": True,
        "degraded": False,
        "gpus": [],
    }
    degraded = health(states("ready", "restarting"))
    assert (degraded["ready"], degraded["live"], degraded["degraded"]) == (False, True, True)
    assert degraded["gpus"][1] == {"gpu": "1", "state": "restarting", "pid": 101, "metrics": "http://h:9004/metrics",
                                   "restarts": 1}  # fmt: skip
    assert health(states("starting", "starting"))["live"] and not health(states("failed", "failed"))["live"]
    gauges = host_gauges(states("ready", "failed"))
    assert 'tritonprep_host_gpu_ready{gpu="0"} 1' in gauges and 'tritonprep_host_gpu_ready{gpu="1"} 0' in gauges
    assert 'tritonprep_host_restarts_total{gpu="1"} 1' in gauges


def test_reports_number_gpus_as_the_launcher_does(monkeypatch, tmp_path):
    assert reports.host_gpu(0, {}) == 0 and reports.host_gpu(None, {reports.GPUS_ENV: "3"}) is None
    assert reports.host_gpu(0, {reports.GPUS_ENV: "3"}) == 3 and reports.host_gpu(1, {reports.GPUS_ENV: "0,2"}) == 2
    assert reports.host_gpu(1, {reports.GPUS_ENV: "3"}) == 1  # out of the list: as it is
    monkeypatch.setenv(reports.ENV, str(tmp_path))
    monkeypatch.setenv(reports.GPUS_ENV, "2")
    reports.write_fault("CUDA error [cudaErrorIllegalAddress] on GPU 0: an illegal memory access", instance="p_0_0")
    [fault] = reports.read_faults(tmp_path)
    assert fault.sticky_cuda and fault.device == 2  # the server's device 0 is the host's GPU 2


def test_the_log_filter_labels_each_line(tmp_path):
    import io

    sink = io.BytesIO()
    logfilter.run(io.BytesIO(b"I1126 line one\nI1126 line two\n"), sink, "gpu1")
    assert sink.getvalue() == b"[gpu1] I1126 line one\n[gpu1] I1126 line two\n"


FAKE_PA = """#!{python}
import csv, sys, time
args = sys.argv[1:]
name = args[args.index("-f") + 1]
conc = int(args[args.index("--concurrency-range") + 1].split(":")[0])
time.sleep(0.1)
keys = ["Inferences/Second", "p50 latency", "p90 latency", "p99 latency", "Avg latency", "Server Queue",
        "Server Compute Input", "Server Compute Infer", "Server Compute Output", "Client Send", "Client Recv"]
with open(name, "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=keys)
    w.writeheader()
    w.writerow({{"Inferences/Second": 1000 * conc, "p50 latency": 2000 * conc, "p90 latency": 3000,
                 "p99 latency": 4000 * conc, "Avg latency": 2000, "Server Queue": 100, "Server Compute Input": 10,
                 "Server Compute Infer": 20, "Server Compute Output": 30, "Client Send": 1, "Client Recv": 1}})
"""


def test_perf_analyzer_in_several_processes_adds_its_rates(tmp_path):
    """``processes`` perf_analyzers split the concurrency (10 as 4, 3, 3): images/s add up, p50 is their mean, p99
    their worst."""
    from scripts import perf_sweep

    pa = tmp_path / "perf_analyzer"
    pa.write_text(FAKE_PA.format(python=sys.executable))
    pa.chmod(pa.stat().st_mode | stat.S_IEXEC)
    data = tmp_path / "input.json"
    data.write_text(json.dumps({"data": []}))
    row = perf_sweep.run_one(str(pa), "classify", "h:1", "grpc", data, 8, 10, 1000, tmp_path, [], processes=3)
    assert row is not None and row.processes == 3 and row.images_per_s == 10_000
    assert row.p50_ms == pytest.approx((8 + 6 + 6) / 3) and row.p99_ms == 16.0 and row.client_cpu_cores >= 0


def test_the_gpu_count_goals():
    from scripts.bench.harness.scaling import gpu_goals, gpus_section

    rows = [{"kind": "gpus", "config": m, "images_per_request": b, "gpus": n, "images_per_s": rate * n * f,
             "p50_ms": 3.0 + 0.1 * n, "processes": n, "client_cpu_cores": 1.0}
            for m in ("classify", "classify_fused", "embed") for b, rate in ((8, 100.0), (32, 120.0), (1, 10.0))
            for n, f in ((1, 1.0), (2, 0.96), (4, 0.9))]  # fmt: skip
    servers = [{"tag": f"gpus-{n}", "ready_s": 10.0 + n, "stop_s": 6.0, "exit_code": 0, "tritonservers": n}
               for n in (1, 2, 4)]  # fmt: skip
    goals = {g.name: g for g in gpu_goals(rows, servers)}
    assert goals["`classify` 8 img/request, 2 GPUs / 1 GPU"].met  # 1.92x >= 1.9x
    assert goals["`classify` 8 img/request, 4 GPUs / 1 GPU"].met is False  # 3.6x < 3.8x
    assert goals["`embed` 32 img/request, 2 GPUs / 1 GPU"].met
    assert goals["`classify` c=1 p50, 4 GPUs / 1 GPU"].met is False  # 3.4 / 3.1 ms > 1.05x
    assert goals["launch to ready, 4 GPUs / 1 GPU"].met is False and goals["stop, 4 GPUs / 1 GPU"].met
    text = "\n".join(gpus_section(rows, {"servers": servers}))
    assert "| classify | 8 (c=64 x N) | 100 (1.00x) | 192 (1.92x) | 360 (3.60x) |" in text
