"""What the container tests share (tests/unit/test_container.py, test_container_images.py): the deployment
files' paths, Compose's variable interpolation and merge tags as `docker compose` reads them, and small
readers of command lines, model configs and Dockerfiles. Their compose fixtures are in conftest.py."""

from __future__ import annotations

import re
import subprocess
from io import BytesIO
from pathlib import Path
from typing import Any

import yaml
from dockerfile_parse import DockerfileParser
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "docker"
REPO = ROOT / "model_repository"
COMPOSE = DOCKER / "compose.yaml"
DOCKERFILE = DOCKER / "Dockerfile"
DOCKERFILE_PIP = DOCKER / "Dockerfile.pip"
K8S = DOCKER / "k8s" / "tritonprep.yaml"
K8S_PIP = DOCKER / "k8s" / "tritonprep-pip.yaml"
#: the server of each image choice (compose profile)
SERVERS = {"ngc": "triton", "cpu": "triton-cpu", "gpu": "triton-gpu"}
PIP_SERVERS = ("triton-cpu", "triton-gpu")
SCHEMA = Path(__file__).resolve().parent / "data" / "compose-spec.json"
ONNX = REPO / "classifier" / "1" / "model.onnx"
ENV = {"TRITON_ADMIN_KEY": "test-key"}
DTYPE_BYTES = {model_config_pb2.TYPE_FP32: 4, model_config_pb2.TYPE_FP16: 2}

# ---------------------------------------------------------------------------- compose interpolation
_VAR = re.compile(r"\$(?:(\$)|\{(?P<braced>[^}]*)\}|(?P<plain>[A-Za-z_][A-Za-z0-9_]*))")
_BRACED = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?+])(?P<arg>.*))?$", re.S)


class InterpolationError(ValueError):
    """A ${VAR:?message} whose variable is unset, as `docker compose` reports it."""


def interpolate(value: Any, env: dict[str, str]) -> Any:
    """Compose's variable substitution (compose-spec 12-interpolation.md), without nesting."""
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def sub(m: re.Match[str]) -> str:
        if m.group(1):
            return "$"
        if m.group("plain"):
            return env.get(m.group("plain"), "")
        braced = _BRACED.match(m.group("braced"))
        assert braced, f"unsupported interpolation ${{{m.group('braced')}}}"
        name, op, arg = braced.group("name"), braced.group("op"), braced.group("arg")
        assert arg is None or "${" not in arg, "nested interpolation is not modelled here"
        val = env.get(name)
        unset = val is None or (val == "" and op is not None and op.startswith(":"))
        if op in (":-", "-"):
            return arg if unset else val
        if op in (":?", "?"):
            if unset:
                raise InterpolationError(f"{name}: {arg}")
            return val
        if op in (":+", "+"):
            return "" if unset else arg
        return val or ""

    return _VAR.sub(sub, value)


class ComposeLoader(yaml.SafeLoader):
    """YAML with Compose's merge tags (!reset, !override), read as the value they carry."""


def _tagged(loader: yaml.SafeLoader, node: yaml.Node) -> Any:
    if isinstance(node, yaml.MappingNode):
        return loader.construct_mapping(node, deep=True)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node, deep=True)
    return loader.construct_scalar(node)


for _tag in ("!reset", "!override"):
    ComposeLoader.add_constructor(_tag, _tagged)


def flags(command: list[str]) -> dict[str, list[str]]:
    """--name=value flags of a command line, by name."""
    out: dict[str, list[str]] = {}
    for arg in command:
        if arg.startswith("--") and "=" in arg:
            name, value = arg[2:].split("=", 1)
            out.setdefault(name, []).append(value)
    return out


def load_config(path: Path) -> model_config_pb2.ModelConfig:
    return text_format.Parse(path.read_text(), model_config_pb2.ModelConfig())


def dockerfile(path: Path = DOCKERFILE) -> DockerfileParser:
    return DockerfileParser(fileobj=BytesIO(path.read_bytes()))


def dockerfile_tag() -> str:
    """The default of the ARG TRITON_TAG that precedes FROM."""
    for instr in dockerfile().structure:
        if instr["instruction"] == "ARG" and instr["value"].startswith("TRITON_TAG="):
            return instr["value"].split("=", 1)[1]
    raise AssertionError("docker/Dockerfile has no ARG TRITON_TAG=<default>")


def run_with_cuda_pools(args: list[str], dev: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sh", str(DOCKER / "with-cuda-pools"), *args],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "TRITONPREP_DEV_DIR": str(dev), **env},
        check=False,
        timeout=30,
    )
