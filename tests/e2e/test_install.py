"""Installed anywhere: the wheel in a fresh virtual environment serves every default model from an empty folder.

The suite's own environment is an editable install, which imports straight from the checkout and so hides
what the distribution leaves out (tritonprep.pipeline once was missing: classify_fused could not load anywhere
but in a checkout). Here the wheel is built from the checkout, with the model repository and the exported
networks in it, and installed with its server and CPU extras into a new virtual environment that does not see
the system's packages. That environment's `tritonprep serve` runs in an empty folder, with no checkout and no
``--model-repository``, and must serve every default model. Its `tritonprep classify` then answers a real
photo, and a second `tritonprep serve` on the same ports exits 2 at once while the first keeps serving. The
first stops on SIGTERM with nothing left behind and nothing written into the installed repository. Last, with
onnxruntime removed (the ``server`` extra alone), `tritonprep serve` refuses in one line naming the extras.

Quick: the dependencies come from a wheelhouse, ``.cache/wheelhouse`` (``$TRITONPREP_WHEELHOUSE``). The first
run fills it from PyPI with ``pip download --prefer-binary``, because pip's own cache keeps nothing on this
machine. Installs use ``--no-index --no-compile``: bytecode is written at the first import instead, which
costs about 2 s of the first start and saves about 11 s of the install.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tritonprep_testkit import leftovers
from tritonprep_testkit.packaging import build_wheel
from tritonprep_testkit.servers import REPO, free_ports

pytestmark = pytest.mark.e2e

MODELS = "analyze, classifier, classify, classify_fused, embed, embedder, postprocess, preprocess"
WHEELHOUSE = Path(os.environ.get("TRITONPREP_WHEELHOUSE", REPO / ".cache" / "wheelhouse"))
EXTRAS = "server,cpu"
#: the issue's goals: a second server on busy ports exits within this bound; the server stops within this one
REFUSAL_BOUND_S = 5.0
STOP_BOUND_S = 60.0


@dataclass(frozen=True)
class Install:
    """A fresh virtual environment holding the wheel with its extras."""

    bin: Path
    repository: Path  # the model repository the wheel installed


def pip(python: Path, *args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(python), "-m", "pip", *args, "--disable-pip-version-check"],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def install_offline(python: Path, requirement: str) -> subprocess.CompletedProcess[str]:
    return pip(python, "install", "-q", "--no-index", "--no-compile", "--find-links", str(WHEELHOUSE), requirement)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Install:
    """The wheel and its server and CPU extras in a fresh virtual environment (see the module's description)."""
    base = tmp_path_factory.mktemp("install")
    wheel = build_wheel(base)
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)  # no --system-site-packages
    python, requirement = venv / "bin" / "python", f"{wheel}[{EXTRAS}]"
    r = install_offline(python, requirement)
    if r.returncode != 0:  # the wheelhouse lacks something: fetch what the wheel requires from the index
        WHEELHOUSE.mkdir(parents=True, exist_ok=True)
        fetched = pip(python, "download", "-q", "--prefer-binary", "-d", str(WHEELHOUSE), requirement)
        assert fetched.returncode == 0, fetched.stderr
        for own in WHEELHOUSE.glob("tritonprep-*.whl"):  # the wheel under test is never taken from there
            own.unlink()
        r = install_offline(python, requirement)
    assert r.returncode == 0, r.stderr
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    return Install(venv / "bin", venv / "lib" / version / "site-packages" / "tritonprep" / "model_repository")


def clean_env() -> dict[str, str]:
    """This environment without what would point the install at the checkout or at the suite's virtualenv."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}


def files_of(folder: Path) -> dict[str, int]:
    """Every file under ``folder`` with its size, but the bytecode that Python writes where it may (a plain
    ``pip install`` writes it at install time; this one is ``--no-compile``)."""
    files = (p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    return {str(p.relative_to(folder)): p.stat().st_size for p in files}


def wait_for(proc: subprocess.Popen[str], needle: str, timeout: float) -> str:
    """The stderr lines of ``proc`` up to the one holding ``needle``; AssertionError with them if it never comes."""
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stderr.readline()  # type: ignore[union-attr]
        if not line:
            if proc.poll() is not None:
                break
            continue
        lines.append(line.rstrip())
        if needle in line:
            return "\n".join(lines)
    raise AssertionError(f"{needle!r} not seen; output:\n" + "\n".join(lines))


def test_the_installed_package_imports_from_the_environment_not_the_checkout(installed, tmp_path):
    out = subprocess.run(
        [str(installed.bin / "python"), "-c", "import tritonprep.pipeline.fused as f; print(f.__file__)"],
        cwd=tmp_path,
        env=clean_env(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert "site-packages" in out and not out.startswith(str(REPO)), out
    found = subprocess.run(
        [str(installed.bin / "python"), "-c", "import tritonprep_testkit"], capture_output=True, check=False
    )
    assert found.returncode != 0  # the wheel holds no test kit


def test_serve_in_an_empty_folder_serves_every_default_model_and_classify_answers(installed, tmp_path, jpegs):
    from tritonprep_client import ClassifyClient

    empty, photos = tmp_path / "empty", tmp_path / "photos"
    empty.mkdir()
    photos.mkdir()
    (photos / "coffee.jpg").write_bytes(jpegs["coffee"])
    before = files_of(installed.repository)
    http, grpc, metrics = free_ports(3)
    ports = ["--http-port", str(http), "--grpc-port", str(grpc), "--metrics-port", str(metrics)]
    serve = [str(installed.bin / "tritonprep"), "serve", *ports]
    proc = subprocess.Popen(
        [*serve, "--log-file", str(tmp_path / "tritonserver.log")],
        cwd=empty,
        env=clean_env(),
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    try:
        text = wait_for(proc, "models ready:", 240)
        assert f"models ready: {MODELS}" in text
        log = (tmp_path / "tritonserver.log").read_text()
        served = re.search(r"model_repository_path\[0\]\s+\|\s+(\S+)", log)
        assert served and Path(served.group(1)) == installed.repository
        prefix = re.search(r"shared-memory regions are /dev/shm/(\S+)\*", log).group(1)  # type: ignore[union-attr]
        work_dir = leftovers.work_dir_of(prefix)

        answer = subprocess.run(
            [str(installed.bin / "tritonprep"), "classify", "coffee.jpg", "--url", f"127.0.0.1:{grpc}", "--json"],
            cwd=photos,
            env=clean_env(),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert answer.returncode == 0, answer.stderr
        top = json.loads(answer.stdout)["predictions"][0]
        assert (top["index"], top["label"]) == (967, "espresso"), answer.stdout

        t0 = time.monotonic()
        second = subprocess.run(
            serve, cwd=empty, env=clean_env(), capture_output=True, text=True, timeout=60, check=False
        )
        assert second.returncode == 2 and time.monotonic() - t0 < REFUSAL_BOUND_S, second.stderr
        (line,) = second.stderr.strip().splitlines()
        assert f"port {http} on 127.0.0.1 is in use" in line, line
        with ClassifyClient(f"127.0.0.1:{grpc}", "grpc", model="classify_fused") as client:  # still serving
            (top_fused,) = client.classify([jpegs["coffee"]])
        assert top_fused[0].index == 967 and proc.poll() is None

        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=STOP_BOUND_S) == 0
        leftovers.wait_clean(prefix, 20.0, work_dir)
        assert files_of(installed.repository) == before  # nothing written into the installed repository
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)


def test_with_the_server_extra_alone_serve_names_the_runtime_extras(installed, tmp_path):
    """Last in the module: it removes onnxruntime from the module's environment."""
    removed = pip(installed.bin / "python", "uninstall", "-y", "-q", "onnxruntime")
    assert removed.returncode == 0, removed.stderr
    ports = [f"--{name}-port={port}" for name, port in zip(("http", "grpc", "metrics"), free_ports(3))]
    r = subprocess.run(
        [str(installed.bin / "tritonprep"), "serve", *ports],
        cwd=tmp_path,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode == 2, r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert "no network runtime for classifier, classify_fused, embedder" in line
    assert "pip install 'tritonprep[server,cpu]'" in line and "gpu-cu13" in line
