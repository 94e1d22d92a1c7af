"""Starting cannot lie: what `tritonprep serve` refuses before any tritonserver starts (tritonprep.launcher.preflight).

A port in use, no model repository, a missing network or no network runtime is one line naming the cause and
what to do, exit code 2, within 5 s, and nothing started (no watchdog, no tritonserver, no restart loop). The
default repository is the checkout's in a checkout, else the one the wheel carries. No tritonserver runs here.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from tritonprep.errors import StartRefused
from tritonprep.launcher import cli, preflight
from tritonprep.launcher.host import Host
from tritonprep.launcher.options import CHECKOUT_REPOSITORY, DEFAULT_REPOSITORY, PACKAGED_REPOSITORY
from tritonprep_testkit.servers import CLI, MODEL_REPOSITORY, local_options

#: the goal: a start that cannot happen says so within this many seconds
REFUSAL_BOUND_S = 5.0


def repository(tmp_path: Path, *models: str, networks: bool = True) -> Path:
    """A copy of the shipped configs of ``models`` (no ``configs/``), with empty network files where ``networks``."""
    repo = tmp_path / "repo"
    for model in models:
        (repo / model / "1").mkdir(parents=True)
        shutil.copy(MODEL_REPOSITORY / model / "config.pbtxt", repo / model / "config.pbtxt")
        if networks and (MODEL_REPOSITORY / model / "1" / "model.onnx").exists():
            (repo / model / "1" / "model.onnx").touch()
    return repo


def refusal(repo: Path, **find: bool) -> str:
    """preflight.check's one line on ``repo`` (modules that ``find`` marks False are not installed)."""
    with pytest.raises(StartRefused) as e:
        preflight.check(Host(local_options(repo)), lambda name: object() if find.get(name, True) else None)
    text = str(e.value)
    assert "\n" not in text
    return text


@pytest.fixture
def listening() -> Iterator[int]:
    """A port another process listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


def test_in_a_checkout_the_default_repository_is_the_checkouts_and_an_install_has_its_own():
    assert DEFAULT_REPOSITORY == CHECKOUT_REPOSITORY == MODEL_REPOSITORY
    assert PACKAGED_REPOSITORY.parent.name == "tritonprep" and PACKAGED_REPOSITORY.name == "model_repository"


def test_no_repository_or_one_without_models_is_refused(tmp_path):
    assert refusal(tmp_path / "absent") == (
        f"no model repository at {tmp_path / 'absent'}: pass --model-repository DIR (<model>/config.pbtxt)"
    )
    (tmp_path / "empty" / "notes").mkdir(parents=True)
    assert "holds no models (no <model>/config.pbtxt)" in refusal(tmp_path / "empty")
    text = refusal(PACKAGED_REPOSITORY)  # a wheel built without its repository
    assert "this install of tritonprep carries none" in text and "make wheel" in text


def test_a_missing_network_is_named_with_how_to_get_it(tmp_path):
    repo = repository(tmp_path, "preprocess", "embedder", networks=False)
    text = refusal(repo)
    assert text.startswith(f"embedder: its network {repo / 'embedder' / '1' / 'model.onnx'} is missing")
    assert "make model" in text and "make wheel" in text


def test_classify_fused_network_is_the_file_it_names(tmp_path):
    repo = repository(tmp_path, "classify_fused")
    text = refusal(repo)
    assert text.startswith(f"classify_fused: its network {repo / 'classifier' / '1' / 'model.onnx'} is missing")


def test_a_channel_last_config_of_an_exported_network_needs_its_variant(tmp_path):
    """The GPU config takes FP16 channel-last; a checkout updated without `make model` lacks the variant."""
    repo = repository(tmp_path, "classifier")
    shutil.copy(MODEL_REPOSITORY / "classifier" / "configs" / "gpu.pbtxt", repo / "classifier" / "config.pbtxt")
    ok = {"find": lambda name: object()}
    preflight.check(Host(local_options(repo)), **ok)  # no export record: a network `model add` brought, as it is
    (repo / "classifier" / "1" / "model.onnx.json").write_text("{}")
    variant = repo / "classifier" / "1" / "model.fp16.nhwc.onnx"
    assert refusal(repo).startswith(f"classifier: its network {variant} is missing; run `make model`")
    variant.touch()
    preflight.check(Host(local_options(repo)), **ok)


def test_no_network_runtime_names_the_models_and_the_extras(tmp_path):
    repo = repository(tmp_path, "preprocess", "classifier", "embedder")
    text = refusal(repo, onnxruntime=False, tensorrt=False)
    assert text == (
        "no network runtime for classifier, embedder: ONNX Runtime is not installed; "
        "pip install 'tritonprep[server,cpu]' (on a GPU: [server,gpu-cu13], or [server,gpu-cu12] for CUDA 12)"
    )
    preflight.check(Host(local_options(repository(tmp_path / "p", "preprocess"))), lambda name: None)  # no network


def test_tensorrt_stands_in_for_onnx_runtime_only_where_a_gpu_is():
    only_trt = {"tensorrt": object()}.get
    assert preflight.runtime_installed(True, only_trt) and not preflight.runtime_installed(False, only_trt)
    assert preflight.runtime_installed(False, {"onnxruntime": object()}.get)


def test_a_port_in_use_is_named(tmp_path, listening):
    host = Host(replace(local_options(repository(tmp_path, "preprocess")), grpc_port=listening))
    with pytest.raises(StartRefused, match=rf"^port {listening} on 127\.0\.0\.1 is in use .*--grpc-port"):
        preflight.check(host)
    assert all(s.watchdog is None for s in host.servers)  # nothing started


def test_serve_refuses_before_any_process_starts(tmp_path):
    with pytest.raises(StartRefused, match="^no model repository at"):
        cli.serve(cli.parse_args(["--model-repository", str(tmp_path / "absent")]))
    with pytest.raises(StartRefused, match="^--gpus 7: this machine shows"):  # an option no server can take
        cli.serve(cli.parse_args(["--gpus", "7"]))


@pytest.mark.parametrize("case", ["port in use", "no repository", "no runtime"])
def test_the_command_refuses_within_5_s_with_exit_code_2(tmp_path, listening, case):
    argv = [str(CLI), "serve", "--http-port", str(listening if case == "port in use" else 0)]
    if case == "no repository":
        argv += ["--model-repository", str(tmp_path / "absent")]
    env = None
    if case == "no runtime":  # the runtimes hidden from the launcher, as with the server extra alone
        (tmp_path / "sitecustomize.py").write_text(
            "import importlib.util\n"
            "_find = importlib.util.find_spec\n"
            "hidden = ('onnxruntime', 'tensorrt')\n"
            "importlib.util.find_spec = lambda name, *a: None if name in hidden else _find(name, *a)\n"
        )
        env = {"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"}
    t0 = time.monotonic()
    r = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env, check=False)
    elapsed = time.monotonic() - t0
    assert r.returncode == 2, r.stderr
    assert elapsed < REFUSAL_BOUND_S, elapsed
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "ERROR: " in lines[0] and "Traceback" not in r.stderr, r.stderr
    expected = {
        "port in use": f"port {listening} on 127.0.0.1 is in use",
        "no repository": "no model repository at",
        "no runtime": "no network runtime for classifier, ",
    }[case]
    assert expected in lines[0], lines[0]
