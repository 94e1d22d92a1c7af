"""The tritonserver command line the embedded launcher builds (no server started here)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tritonprep.errors import ServerError
from tritonprep.launcher import install, process
from tritonprep.launcher.options import ServerOptions


@pytest.mark.parametrize(("gpus", "config_name"), [(0, None), (1, "gpu"), (2, "gpu")])
def test_the_gpu_configuration_is_picked_where_a_gpu_is_visible(monkeypatch, gpus, config_name):
    monkeypatch.setattr(install, "gpu_count", lambda: gpus)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    cmd = process.EmbeddedServer(ServerOptions()).command(Path("/backends"))
    pools = [cmd[i + 1] for i, a in enumerate(cmd) if a == "--cuda-memory-pool-byte-size"]
    assert pools == [f"{g}:{1536 << 20}" for g in range(gpus)]
    if config_name is None:
        assert "--model-config-name" not in cmd
    else:
        assert cmd[cmd.index("--model-config-name") + 1] == config_name


def test_an_explicit_config_name_wins(monkeypatch):
    monkeypatch.setattr(install, "gpu_count", lambda: 1)
    cmd = process.EmbeddedServer(ServerOptions(model_config_name="tensorrt")).command(Path("/backends"))
    assert cmd[cmd.index("--model-config-name") + 1] == "tensorrt"


def test_an_empty_config_name_serves_every_models_config_pbtxt_on_a_gpu(monkeypatch):
    monkeypatch.setattr(install, "gpu_count", lambda: 1)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    cmd = process.EmbeddedServer(ServerOptions(model_config_name="")).command(Path("/backends"))
    assert "--model-config-name" not in cmd and "--cuda-memory-pool-byte-size" in cmd


@pytest.fixture(autouse=True)
def _own_cache(monkeypatch, tmp_path):
    """environment() creates the start-up cache's cuda/ folder: in the test's folder, not the real home."""
    monkeypatch.setenv("TRITONPREP_CACHE_DIR", str(tmp_path / "cache"))


@pytest.mark.parametrize(
    ("visible", "gpus", "child", "pools"),
    [
        (None, None, None, 4),  # every GPU, the environment untouched
        (None, (1, 3), "1,3", 2),
        ("4,5,6,7", (0, 2), "4,6", 2),  # indices count among the GPUs this process sees
    ],
)
def test_gpus_selects_what_tritonserver_sees(monkeypatch, visible, gpus, child, pools):
    monkeypatch.setattr(install, "gpu_count", lambda: 4)
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    server = process.EmbeddedServer(ServerOptions(gpus=gpus))
    cmd = server.command(Path("/backends"))
    assert [cmd[i + 1].split(":")[0] for i, a in enumerate(cmd) if a == "--cuda-memory-pool-byte-size"] == [
        str(g) for g in range(pools)
    ]
    fake = type("Install", (), {"libs": Path("/libs")})()
    assert server.environment(fake).get("CUDA_VISIBLE_DEVICES") == (child if child is not None else visible)


def test_the_server_keeps_the_drivers_compiled_gpu_code_in_the_start_up_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("TRITONPREP_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("CUDA_CACHE_PATH", raising=False)
    fake = type("Install", (), {"libs": Path("/libs")})()
    server = process.EmbeddedServer(ServerOptions())
    assert server.environment(fake)["CUDA_CACHE_PATH"] == str(tmp_path / "cuda")
    assert "CUDA_CACHE_PATH" not in os.environ  # the launcher's own environment is left alone
    monkeypatch.setenv("CUDA_CACHE_PATH", "/operators/choice")
    assert server.environment(fake)["CUDA_CACHE_PATH"] == "/operators/choice"


def test_a_gpu_that_is_not_there_is_refused_with_the_ones_that_are(monkeypatch):
    monkeypatch.setattr(install, "gpu_count", lambda: 2)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    with pytest.raises(ServerError, match=r"shows 2 GPU\(s\) \(0, 1\); \[2\] do not exist"):
        process.EmbeddedServer(ServerOptions(gpus=(0, 2))).command(Path("/backends"))


def test_the_gpus_option_parses_indices():
    from tritonprep.launcher.cli import build_parser

    assert build_parser().parse_args(["--gpus", "0,2"]).gpus == (0, 2)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--gpus", "0,0"])


def test_a_missing_gpu_leaves_no_server_folder_behind(monkeypatch, tmp_path):
    monkeypatch.setattr(install, "gpu_count", lambda: 1)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(process.tempfile, "tempdir", str(tmp_path))
    server = process.EmbeddedServer(ServerOptions(gpus=(1,)), tmp_path / "server.log")
    with pytest.raises(ServerError, match="do not exist"):
        server.start()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("tritonprep-server-")] == []
    assert server.watchdog is None and server._workdir is None


@pytest.mark.parametrize("gpus", [0, 1])
def test_without_a_gpu_tritonserver_gets_no_gpu_pools_or_metrics(monkeypatch, gpus):
    """The flags of a machine without a GPU: no pinned pool, no CUDA pools, no GPU metrics (each of which
    logs a warning or error there); with a GPU all three stay Triton's."""
    monkeypatch.setattr(install, "gpu_count", lambda: gpus)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    cmd = process.EmbeddedServer(ServerOptions()).command(Path("/backends"))
    pinned = cmd[cmd.index("--pinned-memory-pool-byte-size") + 1]
    assert pinned == ("0" if not gpus else str(256 << 20))
    assert ("--allow-gpu-metrics" in cmd) == (not gpus)
    if not gpus:
        assert cmd[cmd.index("--allow-gpu-metrics") + 1] == "false"


def test_serve_takes_its_own_options_and_passes_only_what_follows_the_double_dash(capsys):
    from tritonprep.launcher.cli import options_from_args, parse_args

    args = parse_args(["serve", "--http-port", "9000", "--mps", "off", "--", "--log-info", "false"])
    assert args.http_port == 9000 and args.mps == "off" and args.triton_args == ["--log-info", "false"]
    options = options_from_args(args)
    assert options.extra_args == ("--log-info", "false") and options.mps == "off"
    assert parse_args(["--gpu-memory-budget", "16G"]).gpu_memory_budget == "16G"
    assert parse_args([]).triton_args == [] and parse_args([]).mps == "auto"
    with pytest.raises(SystemExit) as usage:
        parse_args(["serve", "--model-repositry", "x"])  # a typo is our usage error, not tritonserver's
    assert usage.value.code == 2
    err = capsys.readouterr().err
    assert "usage: tritonprep serve" in err and "unrecognized arguments: --model-repositry" in err
    with pytest.raises(SystemExit):
        parse_args(["--mps", "maybe"])
    with pytest.raises(SystemExit):
        parse_args(["serve", "--log-info", "false"])  # tritonserver's option without the --
    assert "unrecognized arguments" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse_args(["stray"])
    assert "tritonserver's own go after --" in capsys.readouterr().err


def test_options_refuse_unknown_mps_modes_and_budgets():
    assert ServerOptions(mps="on", gpu_memory_budget="12000M").gpu_memory_budget == "12000M"
    with pytest.raises(ServerError, match="mps must be one of auto, on, off"):
        ServerOptions(mps="yes")
    with pytest.raises(ServerError, match="not a memory size: 'lots'"):
        ServerOptions(gpu_memory_budget="lots")


def test_mps_on_without_a_gpu_is_refused_and_auto_is_off(monkeypatch, tmp_path):
    monkeypatch.setattr(install, "gpu_count", lambda: 0)
    monkeypatch.setattr(process.tempfile, "tempdir", str(tmp_path))
    server = process.EmbeddedServer(ServerOptions(mps="on"), tmp_path / "server.log")
    with pytest.raises(ServerError, match="--mps on: no GPU is visible here"):
        server.start()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("tritonprep-server-")] == []
    assert process.EmbeddedServer(ServerOptions())._choose_mps(0) == "off"


def test_a_stop_requested_before_the_start_exits_0_without_starting():
    import threading

    from tritonprep.launcher.cli import parse_args, serve

    stopping = threading.Event()
    stopping.set()
    assert serve(parse_args(["--model-repository", "/nonexistent"]), stopping) == 0


def test_the_summary_rows_read_the_served_config_the_reports_and_the_gpu_memory():
    from tritonprep.launcher.summary import model_row
    from tritonprep.reports import InstanceReport

    assert model_row("classify", {"platform": "ensemble"}, [], {}) == ("classify", "ensemble", "-", "-", "-", "-")
    config = {
        "instance_group": [{"count": 2, "kind": "KIND_GPU"}],
        "parameters": {"batch_buckets": {"string_value": "1,8,32"}, "gpu_memory_mb": {"string_value": "1200"}},
    }
    reports = [InstanceReport("classifier", f"classifier_0_{i}", 10 + i, "GPU", 0, "onnxruntime-cuda") for i in (0, 1)]
    row = model_row("classifier", config, reports, {10: 900, 11: 950, 99: 5000})
    assert row == ("classifier", "GPU", "2", "onnxruntime-cuda", "1,8,32", "1850 MiB (budget 1200 MiB each)")
    # without reports: the model's stub processes give the GPU memory, the runtime is unknown
    assert model_row("classifier", config, [], {10: 900}, [10])[3:] == ("-", "1,8,32", "900 MiB (budget 1200 MiB each)")
    assert model_row("postprocess", None, [], {}) == ("postprocess", "?", "?", "-", "-", "-")


def test_every_model_loads_at_once(tmp_path):
    """One loading thread per model (Triton's 4 made the fifth model wait), never fewer than Triton's 4."""
    from tritonprep.launcher.command import load_threads

    assert load_threads(tmp_path / "missing") == 4
    for i in range(6):
        (tmp_path / f"m{i}").mkdir()
        (tmp_path / f"m{i}" / "config.pbtxt").write_text("")
    (tmp_path / "not-a-model").mkdir()
    assert load_threads(tmp_path) == 6
    (tmp_path / "gpu-only" / "configs").mkdir(parents=True)  # served only under --model-config-name gpu
    (tmp_path / "gpu-only" / "configs" / "gpu.pbtxt").write_text("")
    assert load_threads(tmp_path) == 6 and load_threads(tmp_path, "gpu") == 7
    cmd = process.EmbeddedServer(ServerOptions()).command(Path("/backends"), repository=tmp_path)
    assert cmd[cmd.index("--model-load-thread-count") + 1] == "6"


def test_the_exit_waits_at_most_a_quarter_second_for_the_metrics_thread():
    """Triton's metrics thread sleeps half the metrics interval and tritonserver joins it as it exits."""
    from tritonprep.launcher.command import METRICS_INTERVAL_MS

    cmd = process.EmbeddedServer(ServerOptions()).command(Path("/backends"))
    assert int(cmd[cmd.index("--metrics-interval-ms") + 1]) == METRICS_INTERVAL_MS <= 500


FAKE_SMI = """#!/bin/sh
case "$*" in
  *--query-gpu=index,uuid,name,memory.total,memory.used*)
    printf '0, GPU-aaa, NVIDIA H100, 81559, 512\\n1, GPU-bbb, NVIDIA H100, 81559, [N/A]\\n' ;;
  *--query-compute-apps=pid,used_memory*) printf '10, 900\\n10, 100\\n11, 950\\n' ;;
  *) exit 2 ;;
esac
"""


def test_what_the_launcher_reads_of_nvidia_smi(tmp_path, monkeypatch):
    """The GPUs a CUDA_VISIBLE_DEVICES list names (by index or UUID prefix) and each process's GPU memory (summed
    over its GPUs); nothing, never an error, without nvidia-smi or when it fails."""
    from tests.unit.fake_smi import install_fake_smi
    from tritonprep.launcher.install import GpuInfo, gpu_info, smi_query
    from tritonprep.launcher.summary import process_gpu_memory

    install_fake_smi(tmp_path, monkeypatch, FAKE_SMI)
    assert gpu_info(["1", "GPU-a"]) == [GpuInfo("1", "GPU-bbb", "NVIDIA H100", 81559, 0),
                                        GpuInfo("0", "GPU-aaa", "NVIDIA H100", 81559, 512)]  # fmt: skip
    assert gpu_info([]) == [] and gpu_info(["7"]) == []
    assert process_gpu_memory() == {10: 1000, 11: 950}
    assert smi_query("--query-gpu=bogus") is None  # nvidia-smi failed (exit 2)
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    assert smi_query("--query-gpu=index") is None and gpu_info(["0"]) == [] and process_gpu_memory() == {}
