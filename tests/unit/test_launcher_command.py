"""The tritonserver command line the embedded launcher builds (no server started here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tritonprep.launcher import process
from tritonprep.launcher.options import ServerOptions


@pytest.mark.parametrize(("gpus", "config_name"), [(0, None), (1, "gpu"), (2, "gpu")])
def test_the_gpu_configuration_is_picked_where_a_gpu_is_visible(monkeypatch, gpus, config_name):
    monkeypatch.setattr(process, "gpu_count", lambda: gpus)
    cmd = process.EmbeddedServer(ServerOptions()).command(Path("/backends"))
    pools = [cmd[i + 1] for i, a in enumerate(cmd) if a == "--cuda-memory-pool-byte-size"]
    assert pools == [f"{g}:{512 << 20}" for g in range(gpus)]
    if config_name is None:
        assert "--model-config-name" not in cmd
    else:
        assert cmd[cmd.index("--model-config-name") + 1] == config_name


def test_an_explicit_config_name_wins(monkeypatch):
    monkeypatch.setattr(process, "gpu_count", lambda: 1)
    cmd = process.EmbeddedServer(ServerOptions(model_config_name="tensorrt")).command(Path("/backends"))
    assert cmd[cmd.index("--model-config-name") + 1] == "tensorrt"
