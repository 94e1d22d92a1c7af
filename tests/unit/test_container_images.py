"""The container images, checked without Docker, a GPU or TensorRT (`make test-compose` builds and runs one):

- docker/Dockerfile and docker/Dockerfile.pip are parsed (dockerfile-parse): pinned base, extras,
  non-root user, and everything they copy exists and passes the ignore files;
- the classifier's container configs agree with the exported ONNX (onnxruntime reads it),
  with the embedded config and with the preprocess output; classify_fused's container config is
  its GPU config with the ONNX where the image puts it;
- the shell steps (prepare-classifier, with-cuda-pools) and the perf input writer are run;
- the deployment page's container commands name real files, services, profiles and settings.
"""

from __future__ import annotations

import base64
import json
import re
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tritonclient.grpc import model_config_pb2

from tests.unit.container_files import (
    COMPOSE,
    DOCKER,
    DOCKERFILE_PIP,
    ONNX,
    REPO,
    ROOT,
    dockerfile,
    dockerfile_tag,
    load_config,
    run_with_cuda_pools,
)
from tritonprep.classifier.builders import INSTALL_HINT
from tritonprep.classifier.engines import BuildOptions, network_input


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


# ---------------------------------------------------------------------------- the shell steps, run
def test_with_cuda_pools_adds_one_pool_per_visible_gpu(tmp_path):
    for node in ("nvidia0", "nvidia1", "nvidia2", "nvidiactl", "nvidia-uvm", "nvidia-modeset"):
        (tmp_path / node).touch()
    r = run_with_cuda_pools(["echo", "tritonserver", "--x=1"], tmp_path, TRITON_SERVERS="one")
    assert r.returncode == 0 and r.stdout.split() == ["tritonserver", "--x=1"] + [
        f"--cuda-memory-pool-byte-size={i}:{1536 << 20}" for i in range(3)
    ]
    r = run_with_cuda_pools(["echo"], tmp_path, CUDA_VISIBLE_DEVICES="2", TRITON_CUDA_POOL_MB="64")
    assert r.stdout.split() == [f"--cuda-memory-pool-byte-size=0:{64 << 20}"]


def test_with_cuda_pools_runs_one_server_per_gpu_on_shared_ports(tmp_path):
    """Several GPUs: one server each, seeing its GPU alone, on the shared ports, its metrics on the port + k; when
    one exits, the others are stopped and the script exits with its code (the container's restart policy acts)."""
    for node in ("nvidia0", "nvidia1", "nvidia2"):
        (tmp_path / node).touch()
    server = tmp_path / "server"
    server.write_text(
        '#!/bin/sh\necho "$CUDA_VISIBLE_DEVICES $*" >> "$OUT"\n'
        'case " $* " in *" --id=tritonprep-gpu1 "*) sleep 1; exit 3 ;; esac\n'
        "trap 'echo stopped >> \"$OUT\"; exit 0' TERM\nwhile :; do sleep 0.1; done\n"
    )
    server.chmod(0o755)
    out = tmp_path / "out"
    r = run_with_cuda_pools([str(server), "--metrics-port=8002", "--x=1"], tmp_path, CUDA_VISIBLE_DEVICES="5,6,7",
                            OUT=str(out))  # fmt: skip
    lines = sorted(out.read_text().splitlines())
    assert r.returncode == 3 and "exited with code 3" in r.stderr, r.stderr
    pool = f"--cuda-memory-pool-byte-size=0:{1536 << 20}"
    shared = "--reuse-http-port=true --reuse-grpc-port=true"
    age = "--grpc-max-connection-age=30000 --grpc-max-connection-age-grace=30000"
    for k, gpu in enumerate("567"):
        want = f"{gpu} --metrics-port={8002 + k} --x=1 {pool} {shared} --id=tritonprep-gpu{k} {age}"
        assert want in lines, (want, lines)
    assert lines.count("stopped") == 2  # the two others, stopped when GPU 1's exited
    one = run_with_cuda_pools(["echo", "x"], tmp_path, TRITON_SERVERS="one")  # one server over every GPU
    assert one.stdout.split() == ["x"] + [f"--cuda-memory-pool-byte-size={i}:{1536 << 20}" for i in range(3)]
    assert run_with_cuda_pools(["echo"], tmp_path, TRITON_SERVERS="many").returncode == 2


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
