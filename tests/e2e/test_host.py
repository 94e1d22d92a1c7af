"""A multi-GPU host on the CPU: two real tritonservers that stand in for two GPUs (``TRITONPREP_FAKE_GPUS=2``)
run the per-GPU machinery for real: shared HTTP and gRPC ports, a supervisor and a metrics port per server, the
host endpoint (every server's metrics, the host's readiness), a fault that restarts one server while the other
answers, the `tritonprep serve` summary and a stop of both at once. The GPU suite runs the same on real GPUs
(tests/gpu/test_gpu_faults.py, test_gpu_launcher.py)."""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator

import pytest

from tritonprep.errors import ServerError
from tritonprep.launcher import topology
from tritonprep.launcher.host import Host
from tritonprep_client import ClassifyClient
from tritonprep_testkit.faults import OUTAGE_ANSWERS, break_and_recover, quick_settings
from tritonprep_testkit.servers import running_host, serve_command, serve_until_ready_then_stop

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def fake_gpus() -> Iterator[None]:
    """Two CPU servers stand in for two GPUs (where no GPU is visible: on a GPU machine the real ones serve)."""
    before = os.environ.get(topology.FAKE_ENV)
    os.environ[topology.FAKE_ENV] = "2"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(topology.FAKE_ENV, None)
        else:
            os.environ[topology.FAKE_ENV] = before


@pytest.fixture(scope="module")
def host(fake_gpus, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Host]:
    if topology.detect().count < 2:
        pytest.skip("one GPU here: the fake GPUs stand in only where no GPU is visible")
    with running_host(tmp_path_factory.mktemp("host") / "tritonserver.log", supervise=True) as h:
        yield h


def get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:  # noqa: S310 - localhost
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def server_names(url: str, connections: int = 48) -> Counter[str]:
    """The servers that ``connections`` new HTTP connections to ``url`` reached (``GET /v2``'s name)."""
    seen: Counter[str] = Counter()
    for _ in range(connections):
        seen[json.loads(get(f"{url}/v2")[1])["name"]] += 1
    return seen


def test_each_gpu_has_its_own_server_and_both_answer_on_one_address(host, jpegs):
    assert [p.slot.label for p in host.parts] == ["gpu0", "gpu1"]
    assert len({s.pid for s in host.servers}) == 2 and len({s.options.metrics_port for s in host.servers}) == 2
    seen = server_names(host.options.http_url)  # each new connection reaches one of them: both, among 48
    assert set(seen) == {"tritonprep-gpu0", "tritonprep-gpu1"}, seen
    for protocol, url in (("grpc", host.options.grpc_url), ("http", host.options.http_url)):
        with ClassifyClient(url, protocol) as c:
            assert c.classify([jpegs["chelsea"]])[0][0].index in (281, 282, 285)
    log = host.log_path.read_text()
    assert "[gpu0] " in log and "[gpu1] " in log  # every line of a server's log names its GPU


def test_the_statistics_api_answers_for_every_server(host, jpegs):
    """Through the host endpoint (and Host.model_statistics) the statistics of both servers add up; the shared
    port's own API answers for the server one connection reached."""
    before = int(host.model_statistics("classify")["model_stats"][0]["inference_count"])
    for _ in range(12):  # a new client each: new connections, both servers
        with ClassifyClient(host.options.grpc_url) as c:
            c.classify([jpegs["chelsea"]])
    deadline = time.monotonic() + 10  # a server counts a request a moment after its answer left
    while (after := int(host.model_statistics("classify")["model_stats"][0]["inference_count"])) - before < 12:
        if time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert after - before == 12
    base = f"http://{host.options.host}:{host.options.metrics_port}"
    request = urllib.request.Request(f"{base}/v2/models/classify/stats", headers=host.admin_headers)
    with urllib.request.urlopen(request, timeout=10) as r:  # noqa: S310 - localhost
        assert int(json.loads(r.read())["model_stats"][0]["inference_count"]) == after
    assert get(f"{base}/v2/models/classify/stats")[0] == 403  # the admin header is the servers' to check
    one = host.each_server("/v2/models/classify/stats", host.admin_headers)
    assert set(one) == {"tritonprep-gpu0", "tritonprep-gpu1"} and {c for c, _ in one.values()} == {200}


def test_the_host_endpoint_serves_every_servers_metrics_and_the_hosts_health(host):
    base = f"http://{host.options.host}:{host.options.metrics_port}"
    code, body = get(f"{base}/metrics")
    text = body.decode()
    assert code == 200
    for gpu in ("0", "1"):
        assert f'nv_inference_request_success{{gpu="{gpu}",model="classify",version="1"}}' in text
        assert f'tritonprep_host_gpu_ready{{gpu="{gpu}"}} 1' in text
    types = [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")]
    assert len(types) == len(set(types)), "a family's TYPE line appears once"
    assert get(f"{base}/v2/health/ready")[0] == 200 and get(f"{base}/v2/health/live")[0] == 200
    state = json.loads(get(f"{base}/tritonprep/gpus")[1])
    assert state["ready"] and not state["degraded"] and [g["state"] for g in state["gpus"]] == ["ready", "ready"]
    assert [g["pid"] for g in state["gpus"]] == [s.pid for s in host.servers]
    assert get(f"{base}/nothing")[0] == 404


def test_a_dead_server_costs_its_gpu_only_and_the_host_says_it_is_degraded(host, jpegs):
    """kill -9 of GPU 1's tritonserver: its supervisor restarts it alone; GPU 0's server keeps its pid and answers
    throughout; meanwhile the host endpoint says not ready, live, degraded; then ready again."""
    base = f"http://{host.options.host}:{host.options.metrics_port}"
    before = [s.pid for s in host.servers]
    answers: Counter[str] = Counter()
    stop = threading.Event()

    def load() -> None:
        with ClassifyClient(host.options.grpc_url, retry=0) as c:  # no retries: every failure shows
            while not stop.is_set():
                try:
                    c.classify([jpegs["chelsea"]])
                    answers["ok"] += 1
                except Exception as e:  # noqa: BLE001 - counted, and the test says which
                    answers[type(e).__name__] += 1
                    time.sleep(0.05)

    threads = [threading.Thread(target=load, daemon=True) for _ in range(4)]
    for t in threads:
        t.start()
    time.sleep(1.0)
    os.kill(before[1], signal.SIGKILL)
    states, ok_at_kill = [], answers["ok"]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        state = json.loads(get(f"{base}/tritonprep/gpus")[1])
        states.append((state["ready"], state["live"], state["degraded"], state["gpus"][1]["state"]))
        if state["ready"] and len(states) > 2:
            break
        time.sleep(0.2)
    answered_during = answers["ok"] - ok_at_kill
    stop.set()
    for t in threads:
        t.join(30)
    assert (False, True, True, "restarting") in states, states
    assert states[-1][:3] == (True, True, False), states
    after = [s.pid for s in host.servers]
    assert after[0] == before[0] and after[1] != before[1], (before, after)
    assert host.parts[0].supervisor.restarts == 0 and host.parts[1].supervisor.restarts == 1
    assert answered_during > 0, answers  # GPU 0 answered while GPU 1's server restarted
    assert 'tritonprep_host_restarts_total{gpu="1"} 1' in get(f"{base}/metrics")[1].decode()


def test_a_gpu_given_up_on_is_stopped_and_the_others_take_its_connections(fake_gpus, tmp_path):
    """GPU 1's server fails with no restart allowed: its supervisor gives up and stops it, so it no longer takes a
    share of the connections; the host says it is degraded and GPU 0 answers every new connection."""
    if topology.detect().count < 2:
        pytest.skip("one GPU here")
    with running_host(tmp_path / "tritonserver.log", supervise=True, supervisor_kw={"max_restarts": 0}) as h:
        base = f"http://{h.options.host}:{h.options.metrics_port}"
        gone = h.servers[1]
        os.kill(gone.pid, signal.SIGKILL)  # type: ignore[arg-type]
        deadline = time.monotonic() + 30
        while not (h.parts[1].supervisor.gave_up.is_set() and not gone.running) and time.monotonic() < deadline:
            time.sleep(0.1)
        state = json.loads(get(f"{base}/tritonprep/gpus")[1])
        assert [g["state"] for g in state["gpus"]] == ["ready", "failed"], state
        assert (state["ready"], state["live"], state["degraded"]) == (False, True, True)
        assert set(server_names(h.options.http_url, 24)) == {"tritonprep-gpu0"}
        assert not h.gave_up  # the host serves on


def test_a_second_host_on_the_same_ports_is_refused_at_once(host):
    """Triton's reuse-port flags would let another host share the ports without a word: the launcher checks first."""
    other = Host(host.options, None)
    t0 = time.monotonic()
    with pytest.raises(ServerError, match=rf"port {host.options.http_port} on 127\.0\.0\.1 is in use"):
        other.start()
    assert time.monotonic() - t0 < 2 and all(s.watchdog is None for s in other.servers)


@pytest.mark.parametrize("scenario", ["kill-stub", "fail-instance"])
def test_a_fault_in_one_gpus_preprocess_restarts_that_server_alone(fake_gpus, tmp_path, scenario):
    """The fault kit on a two-GPU host: GPU 1's preprocess breaks; its server restarts and answers again, GPU 0's
    is never restarted and answers throughout the outage."""
    if topology.detect().count < 2:
        pytest.skip("one GPU here")
    figures = break_and_recover(scenario, quick_settings(scenario, clients=4), tmp_path)
    assert figures["gpus"] == 2 and figures["broken_gpu"] == "1", figures
    assert figures["restarts"] == 1 and figures["other_gpus_restarts"] == 0 and figures["ready_at_end"], figures
    assert figures["requests_succeed_again_after_s"] is not None, figures
    assert set(figures["during_outage"]) <= OUTAGE_ANSWERS | {"ok"}, figures
    assert figures["during_outage"].get("ok", 0) > 0 and figures["answered_per_s_during_outage"] > 0, figures
    assert set(figures["after_recovery"]) == {"ok"} and figures["client_threads_hung"] == 0, figures
    if scenario == "fail-instance":
        assert figures["trigger_request"] == "instance-failed", figures


def test_serve_with_two_gpus_logs_each_and_stops_both_at_once(fake_gpus, tmp_path):
    """`tritonprep serve` on a two-GPU host: a summary line per GPU (its server's pid and metrics port), and
    SIGTERM stops both servers with exit code 0 and nothing left to kill."""
    log_file = tmp_path / "serve.log"
    cmd = serve_command(log_file, "--gpu-metrics-port", str(free_port_pair()))
    run = serve_until_ready_then_stop(cmd.argv)
    text, code, stop_s = run.text, run.code, run.stop_s
    assert "2 tritonservers, one per GPU (fake GPUs: CPU servers), on shared HTTP and gRPC ports" in text, text
    for gpu in ("0", "1"):
        assert re.search(rf"GPU {gpu}: CPU server; tritonserver pid \d+, CUDA MPS off", text), text
    assert f"host endpoint http://127.0.0.1:{cmd.metrics}" in text, text
    assert code == 0 and re.search(r"tritonserver stopped \(exit code 0\) after [\d.]+ s; nothing left to kill", text)
    assert stop_s < 20, (stop_s, text)


def free_port_pair() -> int:
    """A port P with P + 1 free too (the two GPUs' metrics ports of --gpu-metrics-port P)."""
    import socket

    for _ in range(50):
        with socket.socket() as a:
            a.bind(("127.0.0.1", 0))
            port = a.getsockname()[1]
            with socket.socket() as b:
                try:
                    b.bind(("127.0.0.1", port + 1))
                except OSError:
                    continue
        return port
    raise RuntimeError("no two consecutive free ports")
