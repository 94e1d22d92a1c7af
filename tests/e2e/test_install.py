"""A non-editable install serves every model: the wheel in a fresh virtual environment, as a container gets it.

The suite's own environment is an editable install, which imports straight from the checkout and so
hides a package that the distribution leaves out (tritonprep.pipeline once was: classify_fused could not
load anywhere but in a checkout). Here the wheel built from the checkout is installed with its server
and CPU extras into a new virtual environment that does not see the system's packages, and that
environment's `tritonprep serve` serves the repository, started outside the checkout.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tritonprep_testkit.packaging import build_wheel
from tritonprep_testkit.servers import MODEL_REPOSITORY, serve_command

pytestmark = pytest.mark.e2e

MODELS = "analyze, classifier, classify, classify_fused, embed, embedder, postprocess, preprocess"


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bin folder of a fresh virtual environment with the wheel and its server and CPU extras."""
    base = tmp_path_factory.mktemp("install")
    wheel = build_wheel(base)
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)  # no --system-site-packages
    subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", f"{wheel}[server,cpu]"],
        check=True,
        timeout=600,
    )
    return venv / "bin"


def test_the_installed_package_imports_from_the_environment_not_the_checkout(installed, tmp_path):
    out = subprocess.run(
        [str(installed / "python"), "-c", "import tritonprep.pipeline.fused as f; print(f.__file__)"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert "site-packages" in out and not out.startswith(str(MODEL_REPOSITORY.parent)), out


def _wait_for(proc: subprocess.Popen, needle: str, timeout: float) -> str:
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            if proc.poll() is not None:
                break
            continue
        lines.append(line.rstrip())
        if needle in line:
            return "\n".join(lines)
    raise AssertionError(f"{needle!r} not seen; output:\n" + "\n".join(lines))


def test_a_non_editable_install_serves_every_model_and_classify_fused_answers(installed, tmp_path, jpegs):
    from tritonprep_client import ClassifyClient

    serve = serve_command(tmp_path / "tritonserver.log", repository=MODEL_REPOSITORY)
    argv = [str(installed / "tritonprep"), *serve.argv[1:]]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    proc = subprocess.Popen(argv, cwd=tmp_path, env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    try:
        text = _wait_for(proc, "models ready:", 240)
        assert f"models ready: {MODELS}" in text
        with ClassifyClient(f"127.0.0.1:{serve.grpc}", "grpc", model="classify_fused") as client:
            (top,) = client.classify([jpegs["coffee"]])
        assert top[0].index == 967 and top[0].label == "espresso", top
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
