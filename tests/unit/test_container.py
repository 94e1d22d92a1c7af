"""The deployment manifests, checked without Docker, a GPU or TensorRT (tests/unit/test_container_tools.py runs
the real `docker compose config` and `kubernetes-validate`; `make test-compose` runs the cpu profile).

- docker/compose.yaml is parsed as YAML, interpolated the way Compose does, and validated against the
  Compose Specification's JSON schema (vendored in tests/unit/data/), then held to what the deployment
  needs, for each server (ngc: `triton`; cpu and gpu: the pip image's `triton-cpu` and `triton-gpu`): GPU
  reservation, shm and ulimits, memory pools, ports, read-only models, the engine volume, health check,
  restart policy, privileges, the engine-build step before the NGC server, the pip image's command (parsed
  by `tritonprep serve`'s own parser), the perf profile;
- docker/k8s/ runs the same images and commands, with probes, metrics and an autoscaler.

The images, the configs they serve and the shell steps they run: tests/unit/test_container_images.py.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tests.unit.container_files import (
    DOCKER,
    DOCKERFILE,
    DOCKERFILE_PIP,
    DTYPE_BYTES,
    ENV,
    K8S,
    K8S_PIP,
    PIP_SERVERS,
    REPO,
    ROOT,
    SCHEMA,
    SERVERS,
    ComposeLoader,
    InterpolationError,
    dockerfile_tag,
    flags,
    interpolate,
    load_config,
    run_with_cuda_pools,
)
from tritonprep.launcher.cli import build_parser
from tritonprep.launcher.options import ADMIN_HEADER, ADMIN_KEY_ENV, GRPC_HEADER_PREFIX, RESTRICTED_APIS


@pytest.fixture(scope="module", params=list(SERVERS.values()))
def server(request, compose) -> dict[str, Any]:
    """Each server service in turn: what every image choice must do alike."""
    return compose["services"][request.param]


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
