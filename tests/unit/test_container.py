"""The container deployment, checked without Docker, a GPU or TensorRT.

- docker/compose.yaml is parsed as YAML, interpolated the way Compose does, and validated
  against the Compose Specification's JSON schema (vendored in tests/unit/data/), then held
  to what the deployment needs: GPU reservation, shm and ulimits, memory pools, ports,
  read-only models, the engine volume, health check, restart policy, the engine-build step
  before the server, the perf profile;
- docker/Dockerfile is parsed (dockerfile-parse): pinned base, GPU extra, non-root user, and
  everything it copies exists and passes the ignore file;
- the classifier's container configs agree with the exported ONNX (onnxruntime reads it),
  with the embedded config and with the preprocess output;
- docker/k8s/ runs the same image and tritonserver command;
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
from tritonprep.launcher.options import ADMIN_HEADER, GRPC_HEADER_PREFIX, RESTRICTED_APIS

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "docker"
REPO = ROOT / "model_repository"
COMPOSE = DOCKER / "compose.yaml"
DOCKERFILE = DOCKER / "Dockerfile"
K8S = DOCKER / "k8s" / "tritonprep.yaml"
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


def dockerfile() -> DockerfileParser:
    return DockerfileParser(str(DOCKERFILE))


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
            assert (DOCKER / build["context"] / build["dockerfile"]).resolve() == DOCKERFILE, name
        for mount in service.get("volumes", []):
            if mount["type"] == "bind" and mount["source"] != "./perf":
                assert (DOCKER / mount["source"]).resolve().is_dir(), (name, mount["source"])


# ---------------------------------------------------------------------------- compose: the server
def test_triton_reserves_gpus_by_a_configurable_count(raw_compose, triton):
    devices = triton["deploy"]["resources"]["reservations"]["devices"]
    assert len(devices) == 1 and devices[0]["driver"] == "nvidia" and devices[0]["capabilities"] == ["gpu"]
    assert devices[0]["count"] == "all"
    two = interpolate(raw_compose, {**ENV, "TRITON_GPU_COUNT": "2"})["services"]["triton"]
    assert two["deploy"]["resources"]["reservations"]["devices"][0]["count"] == "2"


def test_triton_has_nvidias_shm_size_and_ulimits(triton):
    assert triton["shm_size"] == "1g"
    assert triton["ulimits"] == {"memlock": -1, "stack": 67108864}


def test_triton_publishes_http_grpc_and_metrics_on_localhost_by_default(raw_compose, triton):
    published = {}
    for port in triton["ports"]:
        host_ip, host_port, container_port = port.split(":")
        published[int(container_port)] = (host_ip, int(host_port))
    assert published == {8000: ("127.0.0.1", 8000), 8001: ("127.0.0.1", 8001), 8002: ("127.0.0.1", 8002)}
    opened = interpolate(raw_compose, {**ENV, "TRITON_BIND_ADDRESS": "0.0.0.0", "TRITON_GRPC_PORT": "9001"})
    assert "0.0.0.0:9001:8001" in opened["services"]["triton"]["ports"]


def test_triton_command_is_locked_down_and_serves_both_repositories(triton):
    cmd = triton["command"]
    assert cmd[:2] == ["with-cuda-pools", "tritonserver"]
    f = flags(cmd)
    assert f["model-repository"] == ["/opt/tritonprep/models", "/engines/repository"]
    assert f["model-control-mode"] == ["none"] and f["strict-readiness"] == ["true"]
    assert f["model-config-name"] == ["tensorrt"] and f["exit-on-error"] == ["true"]
    assert "--disable-auto-complete-config" in cmd
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


def test_models_are_mounted_read_only_and_classifier_exists_once(compose, triton):
    """Triton makes a model that is in two repositories unavailable: the classifier must only be
    in the engine volume's repository, the other models only in /opt/tritonprep/models."""
    binds = {m["target"]: m for m in triton["volumes"] if m["type"] == "bind"}
    served = {Path(t).name for t in binds if t.startswith("/opt/tritonprep/models/")}
    assert all(m.get("read_only") is True for m in binds.values())
    ensemble = load_config(REPO / "classify" / "configs" / "tensorrt.pbtxt")  # --model-config-name=tensorrt
    steps = {s.model_name for s in ensemble.ensemble_scheduling.step}
    assert served == {"classify"} | steps - {"classifier"}
    for target, mount in binds.items():
        assert (DOCKER / mount["source"]).resolve() == REPO / Path(target).name
    engines = next(m for m in triton["volumes"] if m["target"] == "/engines")
    assert engines["type"] == "volume" and engines["source"] in compose["volumes"] and engines["read_only"] is True


def test_triton_is_health_checked_and_restarted(triton):
    test = triton["healthcheck"]["test"]
    assert test[0] == "CMD" and "http://localhost:8000/v2/health/ready" in test and "-f" in " ".join(test)
    assert triton["restart"] == "unless-stopped" and triton["init"] is True
    assert triton["security_opt"] == ["no-new-privileges:true"] and triton["cap_drop"] == ["ALL"]
    assert "privileged" not in triton and "network_mode" not in triton


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
    assert perf["depends_on"] == {"triton": {"condition": "service_healthy"}}
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
def k8s_docs() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(K8S.read_text()) if d]


def k8s_deployment() -> dict[str, Any]:
    return next(d for d in k8s_docs() if d["kind"] == "Deployment")


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


def test_k8s_service_exposes_the_three_ports():
    service = next(d for d in k8s_docs() if d["kind"] == "Service")
    deployment = k8s_deployment()
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    assert {p["name"]: p["port"] for p in service["spec"]["ports"]} == {"http": 8000, "grpc": 8001, "metrics": 8002}


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
        f"--cuda-memory-pool-byte-size={i}:{512 << 20}" for i in range(3)
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
def test_documented_container_commands_name_real_files_services_and_settings(raw_compose):
    section = (ROOT / "docs" / "deployment.md").read_text().split("\n## Containers\n", 1)[1].split("\n## ", 1)[0]
    commands = "\n".join(re.findall(r"```bash\n(.*?)```", section, re.S))
    assert "docker compose -f docker/compose.yaml up -d --build" in commands
    services = set(raw_compose["services"])
    for name in re.findall(r"docker compose -f docker/compose.yaml (?:logs|--profile perf run --rm) (\S+)", commands):
        assert name in services, name
    compose_text = COMPOSE.read_text()
    written = re.findall(r"([A-Z][A-Z_]+)=%s", commands)  # what the printf writes into docker/.env
    assert set(written) == {"TRITON_ADMIN_KEY", "PERF_UID", "PERF_GID"}
    for var in written:
        assert "${" + var in compose_text, var
    for path in set(re.findall(r"\b((?:docker|scripts)/[\w./-]+)", commands)):
        if path not in ("docker/.env", "docker/perf/classify.csv"):
            assert (ROOT / path).exists(), path
