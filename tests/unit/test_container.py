"""The container deployment, checked without Docker, a GPU or TensorRT (tests/unit/test_container_tools.py
runs the real `docker compose config` and `kubernetes-validate`; `make test-compose` runs the cpu profile).

- docker/compose.yaml is parsed as YAML, interpolated the way Compose does, and validated
  against the Compose Specification's JSON schema (vendored in tests/unit/data/), then held
  to what the deployment needs, for each server (ngc: `triton`; cpu and gpu: the pip image's
  `triton-cpu` and `triton-gpu`): GPU reservation, shm and ulimits, memory pools, ports, read-only
  models, the engine volume, health check, restart policy, privileges, the engine-build step before
  the NGC server, the pip image's command (parsed by `tritonprep serve`'s own parser), the perf profile;
- docker/Dockerfile and docker/Dockerfile.pip are parsed (dockerfile-parse): pinned base, extras,
  non-root user, and everything they copy exists and passes the ignore files;
- the classifier's container configs agree with the exported ONNX (onnxruntime reads it),
  with the embedded config and with the preprocess output; classify_fused's container config is
  its GPU config with the ONNX where the image puts it;
- docker/k8s/ runs the same images and commands, with probes, metrics and an autoscaler;
- the shell steps (prepare-classifier, with-cuda-pools) and the perf input writer are run.
"""

from __future__ import annotations

import base64
import json
import math
import re
import struct
import subprocess
import sys
from io import BytesIO
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from dockerfile_parse import DockerfileParser
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from tritonprep.classifier.builders import INSTALL_HINT
from tritonprep.classifier.engines import BuildOptions, network_input
from tritonprep.launcher.cli import build_parser
from tritonprep.launcher.options import ADMIN_HEADER, ADMIN_KEY_ENV, GRPC_HEADER_PREFIX, RESTRICTED_APIS

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


@pytest.fixture(scope="module")
def raw_compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


@pytest.fixture(scope="module")
def compose(raw_compose) -> dict[str, Any]:
    """The compose file with the defaults of every variable and a TRITON_ADMIN_KEY, as `up` sees it."""
    return interpolate(raw_compose, ENV)


@pytest.fixture(scope="module")
def triton(compose) -> dict[str, Any]:
    return compose["services"]["triton"]


@pytest.fixture(scope="module", params=list(SERVERS.values()))
def server(request, compose) -> dict[str, Any]:
    """Each server service in turn: what every image choice must do alike."""
    return compose["services"][request.param]


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


# ---------------------------------------------------------------------------- compose: format
def test_compose_file_is_valid_against_the_compose_spec_schema(raw_compose, compose):
    validator = jsonschema.Draft7Validator(json.loads(SCHEMA.read_text()))
    for doc in (raw_compose, compose):
        errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path))
        assert not errors, "\n".join(f"{list(e.absolute_path)}: {e.message}" for e in errors)


def test_schema_validation_catches_a_misspelt_key(raw_compose):
    """The check has teeth: the schema rejects what Compose would reject."""
    broken = json.loads(json.dumps(raw_compose))
    broken["services"]["triton"]["shmsize"] = "1g"
    broken["services"]["triton"]["deploy"]["resources"]["reservations"]["devices"][0]["capabilitys"] = ["gpu"]
    errors = list(jsonschema.Draft7Validator(json.loads(SCHEMA.read_text())).iter_errors(broken))
    assert len(errors) >= 2


def test_compose_refuses_to_start_without_an_admin_key(raw_compose):
    with pytest.raises(InterpolationError, match="TRITON_ADMIN_KEY: set TRITON_ADMIN_KEY in docker/.env"):
        interpolate(raw_compose, {})


def test_compose_works_from_the_repository_root_and_from_docker(raw_compose):
    """Compose resolves relative paths against the compose file's folder, wherever it is run from."""
    for name, service in raw_compose["services"].items():
        build = service.get("build")
        if build:
            assert (DOCKER / build["context"]).resolve() == ROOT, name
            assert (DOCKER / build["context"] / build["dockerfile"]).resolve() in (DOCKERFILE, DOCKERFILE_PIP), name
        for mount in service.get("volumes", []):
            if mount["type"] == "bind" and mount["source"] != "./perf":
                assert (DOCKER / mount["source"]).resolve().is_dir(), (name, mount["source"])


# ---------------------------------------------------------------------------- compose: the servers
def test_one_profile_per_image_and_nothing_without_one(raw_compose):
    """COMPOSE_PROFILES (or --profile) picks the image: each server is in exactly its profile, and every
    service is in a profile, so two servers never start together on the same ports."""
    services = raw_compose["services"]
    for profile, name in SERVERS.items():
        assert services[name]["profiles"] == [profile], name
    assert services["engine-build"]["profiles"] == ["ngc"]
    assert all(s.get("profiles") for s in services.values())
    assert services["triton-cpu"]["build"]["dockerfile"] == services["triton-gpu"]["build"]["dockerfile"]


def test_gpu_servers_reserve_gpus_by_a_configurable_count_and_the_cpu_server_none(raw_compose):
    for name in ("triton", "triton-gpu"):
        devices = interpolate(raw_compose, ENV)["services"][name]["deploy"]["resources"]["reservations"]["devices"]
        assert len(devices) == 1 and devices[0]["driver"] == "nvidia" and devices[0]["capabilities"] == ["gpu"]
        assert devices[0]["count"] == "all"
        two = interpolate(raw_compose, {**ENV, "TRITON_GPU_COUNT": "2"})["services"][name]
        assert two["deploy"]["resources"]["reservations"]["devices"][0]["count"] == "2"
    assert "deploy" not in raw_compose["services"]["triton-cpu"]


def test_servers_have_nvidias_shm_size_and_ulimits(server):
    assert server["shm_size"] == "1g"
    assert server["ulimits"] == {"memlock": -1, "stack": 67108864}


def test_servers_listen_and_publish_on_the_same_ports_on_localhost_by_default(raw_compose, server):
    """The container port is the host port (so the same command serves behind published ports or on the
    host's network), published on 127.0.0.1 unless TRITON_BIND_ADDRESS opens it."""
    name = next(n for n, s in interpolate(raw_compose, ENV)["services"].items() if s == server)
    assert server["ports"] == [f"127.0.0.1:{p}:{p}" for p in (8000, 8001, 8002)]
    f = flags(server["command"])
    assert (f["http-port"], f["grpc-port"], f["metrics-port"]) == (["8000"], ["8001"], ["8002"])
    moved = {**ENV, "TRITON_BIND_ADDRESS": "0.0.0.0", "TRITON_GRPC_PORT": "9001", "TRITON_HTTP_PORT": "9000"}
    opened = interpolate(raw_compose, moved)["services"][name]
    assert "0.0.0.0:9001:9001" in opened["ports"] and flags(opened["command"])["grpc-port"] == ["9001"]
    assert "http://localhost:9000/v2/health/ready" in opened["healthcheck"]["test"]


def test_triton_command_is_locked_down_and_serves_both_repositories(triton):
    cmd = triton["command"]
    assert cmd[:2] == ["with-cuda-pools", "tritonserver"]
    f = flags(cmd)
    assert f["model-repository"] == ["/opt/tritonprep/models", "/engines/repository"]
    assert f["model-control-mode"] == ["none"] and f["strict-readiness"] == ["true"]
    assert f["model-config-name"] == ["tensorrt"] and f["exit-on-error"] == ["true"]
    assert "--disable-auto-complete-config" in cmd
    # every model loads at once, as the launcher has it (tritonprep.launcher.command.load_threads)
    assert int(f["model-load-thread-count"][0]) >= sum(1 for p in REPO.iterdir() if (p / "config.pbtxt").is_file())
    for restricted in ("http-restricted-api", "grpc-restricted-protocol"):
        apis, secret = f[restricted][0].split(":", 1)
        # the embedded launcher's restricted set and header, mirrored
        assert tuple(apis.split(",")) == RESTRICTED_APIS
        assert secret == f"{ADMIN_HEADER}=test-key"


def test_cuda_memory_pool_holds_the_largest_preprocess_batch(triton, tmp_path):
    pre = load_config(REPO / "preprocess" / "config.pbtxt")
    pixels = next(o for o in pre.output if o.name == "PIXELS")
    largest = pre.max_batch_size * math.prod(pixels.dims) * DTYPE_BYTES[pixels.data_type]
    assert largest == 256 * 3 * 224 * 224 * 4  # 154 MB
    pool_mb = int(triton["environment"]["TRITON_CUDA_POOL_MB"])
    assert pool_mb << 20 >= 3 * largest
    (tmp_path / "nvidia0").touch()
    out = run_with_cuda_pools(["echo"], tmp_path, TRITON_CUDA_POOL_MB=str(pool_mb)).stdout.split()
    assert out == [f"--cuda-memory-pool-byte-size=0:{pool_mb << 20}"]


def test_every_model_is_mounted_read_only_and_classifier_exists_once(compose, triton):
    """The NGC server serves every model of the repository. Triton makes a model that is in two
    repositories unavailable: the classifier must only be in the engine volume's repository, every
    other model only in /opt/tritonprep/models; classify_fused reads the classifier's ONNX from
    /opt/tritonprep/classifier."""
    binds = {m["target"]: m for m in triton["volumes"] if m["type"] == "bind"}
    served = {Path(t).name for t in binds if t.startswith("/opt/tritonprep/models/")}
    assert all(m.get("read_only") is True for m in binds.values())
    every = {p.parent.name for p in REPO.glob("*/config.pbtxt")}
    assert {"classify", "classify_fused", "embed", "analyze"} <= every
    assert served == every - {"classifier"}
    for target, mount in binds.items():
        name = "classifier" if target == "/opt/tritonprep/classifier" else Path(target).name
        assert (DOCKER / mount["source"]).resolve() == REPO / name, target
    assert "/opt/tritonprep/classifier" in binds
    engines = next(m for m in triton["volumes"] if m["target"] == "/engines")
    assert engines["type"] == "volume" and engines["source"] in compose["volumes"] and engines["read_only"] is True


def test_servers_are_health_checked_restarted_and_unprivileged(server):
    test = server["healthcheck"]["test"]
    assert test[0] == "CMD" and "http://localhost:8000/v2/health/ready" in test and "-f" in " ".join(test)
    assert server["restart"] == "unless-stopped" and server["stop_grace_period"] == "45s"
    assert server["security_opt"] == ["no-new-privileges:true"] and server["cap_drop"] == ["ALL"]
    assert "privileged" not in server and "network_mode" not in server and "user" not in server  # the image's
    assert server["networks"] == {"default": {"aliases": ["triton"]}}  # what perf calls, whichever image


def test_the_pip_servers_run_tritonprep_serve_read_only_with_the_admin_key(compose, raw_compose):
    """The command is parsed by `tritonprep serve`'s own parser: every flag exists and means what compose
    wants; the key reaches it through the variable the launcher reads."""
    for name in PIP_SERVERS:
        service = compose["services"][name]
        assert service["command"][:2] == ["tritonprep", "serve"]
        args = build_parser().parse_args(service["command"][2:])
        assert args.model_repository == Path("/opt/tritonprep/models") and args.host == "0.0.0.0"
        assert (args.http_port, args.grpc_port, args.metrics_port) == (8000, 8001, 8002)
        assert args.cuda_memory_pool_mb == int(compose["services"]["triton"]["environment"]["TRITON_CUDA_POOL_MB"])
        assert not args.unrestricted and args.admin_key_file is None and args.exit_timeout == 30
        assert service["environment"] == {ADMIN_KEY_ENV: "test-key"}
        # the image's ENTRYPOINT is tini; /tmp holds the Python backend the launcher assembles and loads
        assert service["read_only"] is True and service["tmpfs"] == ["/tmp:exec,mode=1777"]
        assert "init" not in service
        loopback = interpolate(raw_compose, {**ENV, "TRITON_LISTEN_ADDRESS": "127.0.0.1"})["services"][name]
        assert build_parser().parse_args(loopback["command"][2:]).host == "127.0.0.1"
    assert compose["services"]["triton-cpu"]["build"]["args"] == {"BASE_IMAGE": "debian:bookworm-slim", "EXTRA": "cpu"}
    gpu = compose["services"]["triton-gpu"]
    assert gpu["build"]["args"]["EXTRA"] == "gpu-cu13" and gpu["image"] == "tritonprep-pip:gpu-cu13"
    cu12 = interpolate(raw_compose, {**ENV, "PIP_GPU_EXTRA": "gpu-cu12"})["services"]["triton-gpu"]
    assert cu12["build"]["args"]["EXTRA"] == "gpu-cu12" and cu12["image"] == "tritonprep-pip:gpu-cu12"


def test_the_test_override_holds_only_what_the_sandbox_forbids():
    """make test-compose runs the real compose file; its override may only take the host's network
    (no bridge there) and drop memlock (the sandbox cannot raise it)."""
    override = yaml.load((ROOT / "tests" / "compose" / "override.yaml").read_text(), Loader=ComposeLoader)
    assert list(override) == ["services"] and list(override["services"]) == ["triton-cpu"]
    assert set(override["services"]["triton-cpu"]) == {"network_mode", "networks", "ports", "ulimits"}
    assert override["services"]["triton-cpu"]["network_mode"] == "host"
    assert override["services"]["triton-cpu"]["ulimits"] == {"stack": 67108864}


# ---------------------------------------------------------------------------- compose: engine build, perf
def test_engine_build_runs_before_triton_on_the_same_image(compose, triton):
    build = compose["services"]["engine-build"]
    assert triton["depends_on"] == {"engine-build": {"condition": "service_completed_successfully"}}
    assert build["image"] == triton["image"] and build["build"] == triton["build"]
    assert build["command"] == ["prepare-classifier"] and build["restart"] == "no"
    src = next(m for m in build["volumes"] if m["type"] == "bind")
    assert src["target"] == "/opt/tritonprep/classifier" and src["read_only"] is True
    assert (DOCKER / src["source"]).resolve() == REPO / "classifier"
    engines = next(m for m in build["volumes"] if m["target"] == "/engines")
    assert engines["type"] == "volume" and not engines.get("read_only")
    assert build["deploy"]["resources"]["reservations"]["devices"][0]["capabilities"] == ["gpu"]


@pytest.mark.parametrize("config", ["tensorrt", "onnxruntime"])
def test_every_classifier_choice_has_its_config(raw_compose, config):
    env = {**ENV, "CLASSIFIER_CONFIG": config}
    services = interpolate(raw_compose, env)["services"]
    assert flags(services["triton"]["command"])["model-config-name"] == [config]
    assert services["engine-build"]["environment"]["CLASSIFIER_CONFIG"] == config
    assert load_config(REPO / "classifier" / "configs" / f"{config}.pbtxt").name == "classifier"


def test_perf_profile_benchmarks_the_ensemble_with_the_matching_sdk_image(compose):
    perf = compose["services"]["perf"]
    assert perf["profiles"] == ["perf"]
    assert perf["image"] == f"nvcr.io/nvidia/tritonserver:{dockerfile_tag()}-py3-sdk"
    # whichever server runs (the others' profiles are off): each is an optional dependency
    assert perf["depends_on"] == {n: {"condition": "service_healthy", "required": False} for n in SERVERS.values()}
    cmd = perf["command"]
    assert cmd[0] == "perf_analyzer"
    pairs = dict(zip(cmd[1::2], cmd[2::2]))
    assert pairs["-m"] == "classify" and pairs["-i"] == "grpc" and pairs["-u"] == "triton:8001"
    f = flags(cmd)
    assert f["input-data"] == ["/perf/input.json"] and f["concurrency-range"] == ["1:16:3"]
    assert f["metrics-url"] == ["triton:8002/metrics"]
    # the admin header that opens the restricted config/statistics APIs perf_analyzer reads (gRPC form)
    assert cmd[cmd.index("-H") + 1] == f"{GRPC_HEADER_PREFIX}{ADMIN_HEADER}:test-key"


def test_image_tags_agree_everywhere(compose):
    tag = dockerfile_tag()
    assert re.fullmatch(r"\d{2}\.\d{2}", tag), f"pin a release, not {tag!r}"
    assert compose["services"]["triton"]["build"]["args"]["TRITON_TAG"] == tag
    assert compose["services"]["triton"]["image"] == f"tritonprep-triton:{tag}"
    for container in (
        k8s_deployment()["spec"]["template"]["spec"]["initContainers"]
        + k8s_deployment()["spec"]["template"]["spec"]["containers"]
    ):
        assert container["image"] == f"REGISTRY/tritonprep-triton:{tag}"


# ---------------------------------------------------------------------------- Dockerfile
def test_dockerfile_builds_on_the_pinned_tritonserver_image_as_a_non_root_user():
    df = dockerfile()
    assert df.baseimage == f"nvcr.io/nvidia/tritonserver:{dockerfile_tag()}-py3"
    users = [i["value"] for i in df.structure if i["instruction"] == "USER"]
    assert users == ["triton-server"]
    run = " ".join(i["value"] for i in df.structure if i["instruction"] == "RUN")
    assert "preprocess-cu${CUDA_VERSION%%.*}" in run and '"numpy<2"' in run and "chown triton-server" in run


def test_the_images_cuda_has_a_gpu_extra_with_cupy_below_14():
    """The image installs preprocess-cu<CUDA major>; CuPy 14 needs numpy 2, which the Python backend cannot take.
    No ONNX Runtime there: Triton's TensorRT backend serves the network in the container."""
    from importlib.metadata import requires

    from packaging.requirements import Requirement

    year, month = map(int, dockerfile_tag().split("."))
    cuda = 13 if (year, month) >= (25, 8) else 12  # NVIDIA's release notes: 25.08 is the first on CUDA 13.0
    extra = f"preprocess-cu{cuda}"
    reqs = [Requirement(r) for r in requires("tritonprep") or []]
    in_extra = {r.name: r for r in reqs if r.marker is not None and r.marker.evaluate({"extra": extra})}
    cupy = in_extra[f"cupy-cuda{cuda}x"]
    assert cupy.specifier.contains("13.6.0") and not cupy.specifier.contains("14.0.0")
    assert f"nvidia-nvimgcodec-cu{cuda}" in in_extra
    assert not any(name.startswith("onnxruntime") for name in in_extra)


def test_everything_the_dockerfile_copies_exists_and_is_not_ignored():
    ignore = [
        line.strip()
        for line in (DOCKER / "Dockerfile.dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert ignore[0] == "*"  # an allow-list
    allowed = {line[1:] for line in ignore if line.startswith("!")}
    for instr in dockerfile().structure:
        if instr["instruction"] != "COPY":
            continue
        parts = [p for p in instr["value"].split() if not p.startswith("--")]
        for src in parts[:-1]:
            assert (ROOT / src).exists(), src
            assert any(src == a or src.startswith(a + "/") for a in allowed), f"{src} is excluded by the ignore file"
    for script in ("scripts/build_engine.py", "docker/prepare-classifier", "docker/with-cuda-pools"):
        assert (ROOT / script).stat().st_mode & 0o111, f"{script} is not executable"


def allow_list(path: Path) -> tuple[set[str], list[str]]:
    """What an allow-list ignore file lets through, and what it excludes again."""
    lines = [x.strip() for x in path.read_text().splitlines() if x.strip() and not x.startswith("#")]
    assert lines[0] == "*", f"{path.name} is not an allow-list"
    return {x[1:] for x in lines if x.startswith("!")}, [x for x in lines[1:] if not x.startswith("!")]


def test_the_root_ignore_file_sends_what_both_images_copy_and_nothing_else():
    """The classic builder reads only .dockerignore at the context's root: it must let through what
    either Dockerfile copies (Dockerfile.pip copies the whole context) and never the virtualenvs, the
    caches (.cache/compose holds the test's Docker data) or engines."""
    allowed, excluded = allow_list(ROOT / ".dockerignore")
    ngc_allowed, _ = allow_list(DOCKER / "Dockerfile.dockerignore")
    assert ngc_allowed <= allowed
    assert allowed == ngc_allowed | {"model_repository"} or allowed >= {"pyproject.toml", "backend", "model_repository"}
    assert not any(a.startswith((".venv", ".cache", ".git", "reports", "tests")) for a in allowed)
    assert {"model_repository/*/1/*.plan", "**/__pycache__"} <= set(excluded)


def test_the_pip_image_builds_from_any_debian_12_as_a_non_root_user_with_every_model():
    df = dockerfile(DOCKERFILE_PIP)
    args = {i["value"].split("=", 1)[0]: i["value"].split("=", 1)[1] for i in df.structure if i["instruction"] == "ARG"}
    assert args == {"BASE_IMAGE": "debian:bookworm-slim", "EXTRA": "cpu"}
    assert df.baseimage == "debian:bookworm-slim"  # the ARG substituted
    assert "FROM ${BASE_IMAGE}" in DOCKERFILE_PIP.read_text()
    instructions = [i["instruction"] for i in df.structure]
    assert instructions[-1] == "USER" and df.structure[-1]["value"] == "triton-server"
    assert instructions.count("USER") == 1
    assert df.structure[instructions.index("ENTRYPOINT")]["value"] == '["/usr/bin/tini", "--"]'
    assert "/v2/health/ready" in df.structure[instructions.index("HEALTHCHECK")]["value"]
    run = " ".join(i["value"] for i in df.structure if i["instruction"] == "RUN")
    assert "libpython3.11" in run and "useradd --uid 1000" in run
    assert '".[server,$EXTRA]"' in run and "--no-deps" in run and "pip check" in run
    assert "import numpy, onnxruntime, pytriton, tritonprep.pipeline.fused" in run
    assert "cp -R model_repository/. /opt/tritonprep/models/" in run
    # the extras it accepts are the project's
    from importlib.metadata import metadata

    extras = set(metadata("tritonprep").get_all("Provides-Extra") or [])
    accepted = re.search(r'case "\$EXTRA" in ([\w|-]+)\)', run).group(1).split("|")
    assert set(accepted) <= extras and "cpu" in accepted and "gpu-cu13" in accepted
    # no BuildKit-only syntax: the classic builder builds it too
    text = DOCKERFILE_PIP.read_text()
    assert "# syntax=" not in text and "--chmod" not in text and "--mount" not in text and "<<" not in text


def test_classify_fused_in_the_ngc_image_runs_the_onnx_where_the_image_puts_it():
    """NVIDIA's image serves the classifier as a plan from the engine volume, so classify_fused's container
    config (tensorrt.pbtxt and onnxruntime.pbtxt link to it) is its GPU config with the ONNX's path
    outside the repository: where docker/Dockerfile copies it and compose mounts it."""
    configs = REPO / "classify_fused" / "configs"
    for name in ("tensorrt.pbtxt", "onnxruntime.pbtxt"):
        assert (configs / name).is_symlink() and (configs / name).resolve() == configs / "container.pbtxt"
    container, gpu = load_config(configs / "container.pbtxt"), load_config(configs / "gpu.pbtxt")
    path = container.parameters["network.model"].string_value
    assert path == "/opt/tritonprep/classifier/1/model.onnx"
    assert gpu.parameters["network.model"].string_value == "classifier/1/model.onnx"
    del container.parameters["network.model"], gpu.parameters["network.model"]
    assert container == gpu
    copies = [i["value"].split() for i in dockerfile().structure if i["instruction"] == "COPY"]
    assert ["model_repository/classifier", "/opt/tritonprep/classifier"] in copies


def test_the_containers_postprocess_step_has_four_instances_and_is_otherwise_the_embedded_one():
    """The container's ensembles end with postprocess (its classifier answers logits only): its config
    (tensorrt.pbtxt and onnxruntime.pbtxt link to it) is the embedded config.pbtxt with 4 instances."""
    configs = REPO / "postprocess" / "configs"
    for name in ("tensorrt.pbtxt", "onnxruntime.pbtxt"):
        assert (configs / name).is_symlink() and (configs / name).resolve() == configs / "container.pbtxt"
    container, embedded = load_config(configs / "container.pbtxt"), load_config(REPO / "postprocess" / "config.pbtxt")
    assert [g.count for g in container.instance_group] == [4]
    assert [g.count for g in embedded.instance_group] == [1]
    del container.instance_group[:], embedded.instance_group[:]
    assert container == embedded


def test_the_ngc_image_has_onnx_runtimes_gpu_build_at_the_extras_pin():
    """embedder and classify_fused run their network in a Python-backend instance: the NGC image installs
    onnxruntime-gpu at the pin of the gpu-cu<N> extra (the Dockerfile reads it from pyproject.toml)."""
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for cuda in (12, 13):
        assert any(r.startswith("onnxruntime-gpu[cuda,cudnn]") for r in extras[f"gpu-cu{cuda}"])
    run = " ".join(i["value"] for i in dockerfile().structure if i["instruction"] == "RUN")
    assert '"gpu-${extra#preprocess-}"' in run and '"$ort"' in run and "tritonprep.pipeline.fused" in run


# ---------------------------------------------------------------------------- classifier configs vs ONNX
@pytest.fixture(scope="module")
def onnx_io() -> tuple[list[Any], list[Any]]:
    import onnxruntime as ort

    if not ONNX.is_file():
        pytest.fail(f"{ONNX} is missing: run `make model` (make test does it for you)")
    session = ort.InferenceSession(str(ONNX), providers=["CPUExecutionProvider"])
    return session.get_inputs(), session.get_outputs()


ORT_TYPES = {"tensor(float)": model_config_pb2.TYPE_FP32, "tensor(float16)": model_config_pb2.TYPE_FP16}


@pytest.mark.parametrize("config", ["tensorrt", "onnxruntime"])
def test_container_config_agrees_with_the_onnx_model(onnx_io, config):
    cfg = load_config(REPO / "classifier" / "configs" / f"{config}.pbtxt")
    for tensors, ios in ((cfg.input, onnx_io[0]), (cfg.output, onnx_io[1])):
        assert [t.name for t in tensors] == [io.name for io in ios]
        for t, io in zip(tensors, ios):
            assert t.data_type == ORT_TYPES[io.type], t.name
            assert list(t.dims) == list(io.shape[1:]), t.name
            assert not isinstance(io.shape[0], int), f"{io.name}: the ONNX batch axis must be dynamic"


@pytest.mark.parametrize("config", ["tensorrt", "onnxruntime"])
def test_container_config_agrees_with_the_embedded_config_and_the_preprocess_output(config):
    cfg = load_config(REPO / "classifier" / "configs" / f"{config}.pbtxt")
    embedded = load_config(REPO / "classifier" / "config.pbtxt")
    assert cfg.name == embedded.name and cfg.max_batch_size == embedded.max_batch_size
    # the container's classifier answers the logits alone; the embedded one its top-k too
    assert list(cfg.input) == list(embedded.input) and [o.name for o in cfg.output] == ["logits"]
    assert cfg.output[0] == next(o for o in embedded.output if o.name == "logits")
    assert cfg.platform == {"tensorrt": "tensorrt_plan", "onnxruntime": "onnxruntime_onnx"}[config]
    assert [g.kind for g in cfg.instance_group] == [model_config_pb2.ModelInstanceGroup.KIND_GPU]
    assert cfg.HasField("dynamic_batching")
    pre = load_config(REPO / "preprocess" / "config.pbtxt")
    ensemble = load_config(REPO / "classify" / "configs" / f"{config}.pbtxt")
    pre_step, cls_step = (
        next(s for s in ensemble.ensemble_scheduling.step if s.model_name == n) for n in ("preprocess", "classifier")
    )
    for model_input, tensor in cls_step.input_map.items():
        produced = next(k for k, v in pre_step.output_map.items() if v == tensor)
        out = next(o for o in pre.output if o.name == produced)
        inp = next(i for i in cfg.input if i.name == model_input)
        assert (out.data_type, list(out.dims)) == (inp.data_type, list(inp.dims))
    assert cfg.max_batch_size >= pre.max_batch_size


@pytest.mark.parametrize("ensemble", ["classify", "analyze"])
@pytest.mark.parametrize("config", ["tensorrt", "onnxruntime"])
def test_a_logits_only_classifier_gets_ensembles_with_the_postprocess_step(config, ensemble):
    """--model-config-name=<config> serves the logits-only classifier: classify and analyze then take the
    configs/<config>.pbtxt beside them, the embedded ensemble with the postprocess step between the classifier
    and the outputs; everything else (inputs, outputs, the other steps) is the embedded one's."""
    embedded = load_config(REPO / ensemble / "config.pbtxt")
    container = load_config(REPO / ensemble / "configs" / f"{config}.pbtxt")
    classifier = load_config(REPO / "classifier" / "configs" / f"{config}.pbtxt")
    postprocess = load_config(REPO / "postprocess" / "config.pbtxt")
    assert (container.name, list(container.input), list(container.output)) == (
        embedded.name, list(embedded.input), list(embedded.output)
    )  # fmt: skip
    steps = {s.model_name: s for s in container.ensemble_scheduling.step}
    assert "postprocess" not in {s.model_name for s in embedded.ensemble_scheduling.step}
    logits = steps["classifier"].output_map["logits"]
    assert set(steps["classifier"].output_map) <= {o.name for o in classifier.output} == {"logits"}
    assert dict(steps["postprocess"].input_map) == {"LOGITS": logits}
    assert dict(steps["postprocess"].output_map) == {n: n for n in ("SCORES", "CLASS_IDS", "LABELS")}
    assert {o.name for o in postprocess.output} == {"SCORES", "CLASS_IDS", "LABELS"}
    embedded_classifier = next(s for s in embedded.ensemble_scheduling.step if s.model_name == "classifier")
    assert dict(embedded_classifier.output_map) == dict(steps["postprocess"].output_map)
    others = [s for s in container.ensemble_scheduling.step if s.model_name not in ("classifier", "postprocess")]
    assert others == [s for s in embedded.ensemble_scheduling.step if s.model_name != "classifier"]


def test_engine_profiles_cover_max_batch_size():
    trt = load_config(REPO / "classifier" / "configs" / "tensorrt.pbtxt")
    options = BuildOptions(network_input(REPO / "classifier" / "configs" / "tensorrt.pbtxt")[1])
    assert options.max_batch == trt.max_batch_size
    assert network_input(REPO / "classifier" / "configs" / "tensorrt.pbtxt") == (
        trt.input[0].name,
        tuple(trt.input[0].dims),
    )
    ort = load_config(REPO / "classifier" / "configs" / "onnxruntime.pbtxt")
    accel = ort.optimization.execution_accelerators.gpu_execution_accelerator
    assert [a.name for a in accel] == ["tensorrt"]
    params = dict(accel[0].parameters)
    assert params["precision_mode"] == "FP16"
    dims = "x".join(map(str, ort.input[0].dims))
    assert params["trt_profile_max_shapes"] == f"{ort.input[0].name}:{ort.max_batch_size}x{dims}"
    assert params["trt_profile_min_shapes"] == f"{ort.input[0].name}:1x{dims}"
    assert params["trt_engine_cache_path"].startswith("/ort-cache")


# ---------------------------------------------------------------------------- Kubernetes
def k8s_docs(path: Path = K8S) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def k8s_deployment(path: Path = K8S) -> dict[str, Any]:
    return next(d for d in k8s_docs(path) if d["kind"] == "Deployment")


def test_k8s_runs_the_compose_command_with_one_gpu_per_pod(triton):
    pod = k8s_deployment()["spec"]["template"]["spec"]
    (init,) = pod["initContainers"]
    (server,) = pod["containers"]
    assert init["args"] == ["prepare-classifier"] and init["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert server["resources"]["limits"]["nvidia.com/gpu"] == 1
    k8s_args = [a.replace("$(TRITON_ADMIN_KEY)", "test-key") for a in server["args"]]
    assert k8s_args == triton["command"]
    env = {e["name"]: e for e in server["env"]}
    assert env["TRITON_ADMIN_KEY"]["valueFrom"]["secretKeyRef"]["name"] == "tritonprep-admin"
    assert env["TRITON_CUDA_POOL_MB"]["value"] == triton["environment"]["TRITON_CUDA_POOL_MB"]
    assert pod["securityContext"]["runAsUser"] == 1000 and pod["securityContext"]["runAsNonRoot"] is True
    mounts = {m["mountPath"]: m for m in server["volumeMounts"]}
    assert mounts["/engines"]["readOnly"] is True and "/dev/shm" in mounts
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["dshm"]["emptyDir"]["medium"] == "Memory"
    assert server["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert server["startupProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert server["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"


def test_k8s_runs_the_pip_image_with_the_compose_gpu_command(compose):
    pod = k8s_deployment(K8S_PIP)["spec"]["template"]["spec"]
    (server,) = pod["containers"]
    assert "initContainers" not in pod  # no engine build: the networks run in Python-backend instances
    assert server["image"] == f"REGISTRY/{compose['services']['triton-gpu']['image']}"
    assert server["args"] == compose["services"]["triton-gpu"]["command"]
    assert server["resources"]["limits"]["nvidia.com/gpu"] == 1
    (env,) = server["env"]
    assert env["name"] == ADMIN_KEY_ENV and env["valueFrom"]["secretKeyRef"] == {
        "name": "tritonprep-admin",
        "key": "key",
    }
    assert pod["securityContext"]["runAsUser"] == 1000 and pod["securityContext"]["runAsNonRoot"] is True
    assert server["securityContext"]["readOnlyRootFilesystem"] is True
    assert server["securityContext"]["capabilities"]["drop"] == ["ALL"]
    mounts = {m["mountPath"]: m["name"] for m in server["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes[mounts["/dev/shm"]]["emptyDir"]["medium"] == "Memory"
    assert "medium" not in volumes[mounts["/tmp"]]["emptyDir"]  # the compose tmpfs, executable
    for probe, path in (("startupProbe", "ready"), ("readinessProbe", "ready"), ("livenessProbe", "live")):
        assert server[probe]["httpGet"] == {"path": f"/v2/health/{path}", "port": "http"}


@pytest.mark.parametrize("path", [K8S, K8S_PIP], ids=lambda p: p.name)
def test_k8s_service_exposes_the_three_ports(path):
    service = next(d for d in k8s_docs(path) if d["kind"] == "Service")
    deployment = k8s_deployment(path)
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    assert {p["name"]: p["port"] for p in service["spec"]["ports"]} == {"http": 8000, "grpc": 8001, "metrics": 8002}


@pytest.mark.parametrize("path", [K8S, K8S_PIP], ids=lambda p: p.name)
def test_k8s_metrics_are_scraped_and_the_fleet_scales_on_queue_time(path):
    """Prometheus scrapes :8002/metrics through the pod annotations; the HPA scales the Deployment on
    avg_time_queue_us, the per-pod custom metric the Prometheus adapter makes of Triton's
    nv_inference_queue_duration_us and nv_inference_request_success (the rule is in the file's header)."""
    deployment = k8s_deployment(path)
    template = deployment["spec"]["template"]
    (server,) = template["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in server["ports"]}
    assert template["metadata"]["annotations"] == {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": str(ports["metrics"]),
        "prometheus.io/path": "/metrics",
    }
    (hpa,) = [d for d in k8s_docs(path) if d["kind"] == "HorizontalPodAutoscaler"]
    assert hpa["apiVersion"] == "autoscaling/v2"
    target = hpa["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", deployment["metadata"]["name"])
    assert 1 <= hpa["spec"]["minReplicas"] < hpa["spec"]["maxReplicas"]
    (metric,) = hpa["spec"]["metrics"]
    assert metric["type"] == "Pods" and metric["pods"]["metric"]["name"] == "avg_time_queue_us"
    assert metric["pods"]["target"]["type"] == "AverageValue"
    header = K8S.read_text().split("apiVersion:", 1)[0]  # the adapter rule, which tritonprep-pip.yaml refers to
    for series in ("nv_inference_queue_duration_us", "nv_inference_request_success", 'as: "avg_time_queue_us"'):
        assert series in header, series


def test_k8s_mps_is_the_device_plugins_sharing():
    (config_map,) = k8s_docs(DOCKER / "k8s" / "device-plugin-mps.yaml")
    assert config_map["kind"] == "ConfigMap"
    (plugin_config,) = config_map["data"].values()
    (resource,) = yaml.safe_load(plugin_config)["sharing"]["mps"]["resources"]
    assert resource["name"] == "nvidia.com/gpu" and resource["replicas"] >= 2


# ---------------------------------------------------------------------------- the shell steps, run
def run_with_cuda_pools(args: list[str], dev: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sh", str(DOCKER / "with-cuda-pools"), *args],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "TRITONPREP_DEV_DIR": str(dev), **env},
        check=False,
        timeout=30,
    )


def test_with_cuda_pools_adds_one_pool_per_visible_gpu(tmp_path):
    for node in ("nvidia0", "nvidia1", "nvidia2", "nvidiactl", "nvidia-uvm", "nvidia-modeset"):
        (tmp_path / node).touch()
    r = run_with_cuda_pools(["echo", "tritonserver", "--x=1"], tmp_path)
    assert r.returncode == 0 and r.stdout.split() == ["tritonserver", "--x=1"] + [
        f"--cuda-memory-pool-byte-size={i}:{1024 << 20}" for i in range(3)
    ]
    r = run_with_cuda_pools(["echo"], tmp_path, CUDA_VISIBLE_DEVICES="2", TRITON_CUDA_POOL_MB="64")
    assert r.stdout.split() == [f"--cuda-memory-pool-byte-size=0:{64 << 20}"]


def test_with_cuda_pools_without_gpus_or_with_bad_input(tmp_path):
    r = run_with_cuda_pools(["echo", "ok"], tmp_path)
    assert r.returncode == 0 and r.stdout.split() == ["ok"] and "no GPU" in r.stderr
    r = run_with_cuda_pools(["echo"], tmp_path, TRITON_CUDA_POOL_MB="1g")
    assert r.returncode == 2 and "whole number of MiB" in r.stderr
    assert run_with_cuda_pools([], tmp_path).returncode == 2


def run_prepare(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    base = {
        "PATH": "/usr/bin:/bin",
        "CLASSIFIER_SRC": str(tmp_path / "src"),
        "ENGINES_DIR": str(tmp_path / "eng"),
        "BUILD_ENGINE": f"{sys.executable} {ROOT / 'scripts' / 'build_engine.py'}",
        "HOME": str(tmp_path),
    }
    return subprocess.run(
        ["sh", str(DOCKER / "prepare-classifier")],
        capture_output=True,
        text=True,
        env={**base, **env},
        check=False,
        timeout=120,
    )


@pytest.fixture
def classifier_src(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    (src / "configs").mkdir(parents=True)
    (src / "1").mkdir()
    for cfg in (REPO / "classifier" / "configs").glob("*.pbtxt"):
        (src / "configs" / cfg.name).write_bytes(cfg.read_bytes())
    return src


def test_prepare_classifier_explains_a_missing_export(tmp_path, classifier_src):
    r = run_prepare(tmp_path)
    assert r.returncode == 2 and "run 'make model' on the host first" in r.stderr
    (classifier_src / "1" / "model.onnx").write_bytes(b"onnx")
    r = run_prepare(tmp_path, CLASSIFIER_CONFIG="tensorflow")
    assert r.returncode == 2 and "must be tensorrt or onnxruntime" in r.stderr


@pytest.mark.skipif(Path("/usr/src/tensorrt/bin/trtexec").exists(), reason="this machine has trtexec")
def test_prepare_classifier_for_tensorrt_without_tensorrt_fails_with_the_install_hint(tmp_path, classifier_src):
    (classifier_src / "1" / "model.onnx").write_bytes(b"onnx")
    r = run_prepare(tmp_path)
    assert r.returncode == 3 and r.stderr.strip() == f"build_engine: error: {INSTALL_HINT}"
    dst = tmp_path / "eng" / "repository" / "classifier"
    installed = (dst / "configs" / "tensorrt.pbtxt").read_bytes()
    assert installed == (classifier_src / "configs" / "tensorrt.pbtxt").read_bytes()
    assert not (dst / "1" / "model.plan").exists()


def test_prepare_classifier_for_onnxruntime_installs_the_onnx(tmp_path, classifier_src):
    (classifier_src / "1" / "model.onnx").write_bytes(b"onnx v1")
    stale = tmp_path / "eng" / "repository" / "classifier" / "1"
    stale.mkdir(parents=True)
    (stale / "model.plan").write_bytes(b"old engine")
    r = run_prepare(tmp_path, CLASSIFIER_CONFIG="onnxruntime")
    assert r.returncode == 0, r.stderr
    dst = tmp_path / "eng" / "repository" / "classifier"
    assert (dst / "1" / "model.onnx").read_bytes() == b"onnx v1" and not (dst / "1" / "model.plan").exists()
    assert load_config(dst / "configs" / "onnxruntime.pbtxt").platform == "onnxruntime_onnx"
    assert sorted(p.name for p in (dst / "1").iterdir()) == ["model.onnx"]  # no temporaries left


# ---------------------------------------------------------------------------- perf input data
def load_perf_input_data():
    import importlib.util

    spec = importlib.util.spec_from_file_location("perf_input_data", DOCKER / "perf_input_data.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_perf_input_data_serializes_each_image_as_one_bytes_element(tmp_path, jpegs):
    pid = load_perf_input_data()
    ensemble = load_config(REPO / "classify" / "config.pbtxt")
    assert [(i.name, list(i.dims)) for i in ensemble.input] == [(pid.INPUT_NAME, [1])]
    (tmp_path / "imgs" / "sub").mkdir(parents=True)
    (tmp_path / "imgs" / "a.jpg").write_bytes(jpegs["chelsea"])
    (tmp_path / "imgs" / "sub" / "b.JPEG").write_bytes(jpegs["coffee"])
    (tmp_path / "imgs" / "notes.txt").write_text("not an image")
    out = tmp_path / "perf" / "input.json"
    assert pid.main([str(tmp_path / "imgs"), "-o", str(out)]) == 0
    data = json.loads(out.read_text())["data"]
    assert len(data) == 2
    for item, original in zip(data, (jpegs["chelsea"], jpegs["coffee"])):
        tensor = item["IMAGE"]
        assert tensor["shape"] == [1]
        raw = base64.b64decode(tensor["content"]["b64"])
        (length,) = struct.unpack("<I", raw[:4])
        assert length == len(original) and raw[4:] == original
    assert pid.main([str(tmp_path / "missing"), "-o", str(out)]) == 1


# ---------------------------------------------------------------------------- the deployment page's commands
def test_documented_container_commands_name_real_files_services_profiles_and_settings(raw_compose):
    section = (ROOT / "docs" / "deployment.md").read_text().split("\n## Containers\n", 1)[1].split("\n## ", 1)[0]
    commands = "\n".join(re.findall(r"```bash\n(.*?)```", section, re.S))
    assert "docker compose -f docker/compose.yaml up -d --build" in commands
    services = raw_compose["services"]
    for name in re.findall(
        r"docker compose -f docker/compose.yaml (?:logs|--profile \w+ --profile perf run --rm) (\S+)", commands
    ):
        assert name in services, name
    profiles = {p for s in services.values() for p in s["profiles"]}
    for profile in re.findall(r"--profile (\w+)", commands) + re.findall(r"COMPOSE_PROFILES=(\w+)", commands):
        assert profile in profiles, profile
    # every image choice has its commands: the printf that writes docker/.env names the profile
    assert set(re.findall(r"COMPOSE_PROFILES=(\w+)", commands)) == {"ngc", "cpu"}
    compose_text = COMPOSE.read_text()
    written = set(re.findall(r"([A-Z][A-Z_]+)=%s", commands))  # what the printf writes into docker/.env
    assert written == {"TRITON_ADMIN_KEY", "PERF_UID", "PERF_GID"}
    for var in written:
        assert "${" + var in compose_text, var
    for path in set(re.findall(r"\b((?:docker|scripts|tests)/[\w./-]+)", section)):
        if path not in ("docker/.env", "docker/perf/classify.csv"):
            assert (ROOT / path).exists(), path
    # every setting the compose file reads is in the settings table, and the table names no other
    table = set(re.findall(r"^\| `([A-Z_]+)`(?:, `([A-Z_]+)`)*(?:, `([A-Z_]+)`)?", section, re.M))
    documented = {v for row in table for v in row if v} | set(
        re.findall(r"`(TRITON_(?:HTTP|GRPC|METRICS)_PORT|PERF_[UG]ID)`", section)
    )
    read = set(re.findall(r"\$\{([A-Z_]+)", compose_text)) - {"CUDA_MPS_PIPE_DIRECTORY"}
    assert read <= documented, sorted(read - documented)
    assert documented - {"COMPOSE_PROFILES"} <= read, sorted(documented - read)
