"""The tritonserver command line the embedded launcher builds (no server started here)."""

from __future__ import annotations

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
    assert pools == [f"{g}:{512 << 20}" for g in range(gpus)]
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
