"""The benchmark harness's options and benchmark repositories (scripts/bench/harness): parsing, the server
settings and their guard, instance counts, and the repository copies with those counts. No GPU, no server."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from scripts.bench.harness import build_parser, driver, repos
from scripts.bench.harness.settings import (
    DEFAULT,
    OptionError,
    Setting,
    check_launcher_supports,
    instance_grid,
    instances_label,
    parse_budgets,
    parse_instances,
    parse_mps,
    parse_percentages,
    parse_settings,
    parse_skip,
    parse_tune_grid,
)
from tritonprep.launcher.options import ServerOptions

ROOT = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------------- command line
def test_help_runs_as_a_module():
    proc = subprocess.run([sys.executable, "-m", "scripts.bench.harness", "--help"], capture_output=True, text=True,
                          cwd=ROOT, check=False, timeout=60)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    for option in ("--phase", "--mps", "--gpu-memory-budget", "--instances", "--mps-threads", "--starts"):
        assert option in proc.stdout


def test_the_parser_has_every_option():
    options = {s for a in build_parser()._actions for s in a.option_strings}
    expected = {"--out", "--plan", "--phase", "--skip", "--config", "--interval", "--soak-seconds",
                "--fused-instances", "--torch-python", "--dali-args", "--mps", "--gpu-memory-budget", "--instances",
                "--mps-threads", "--starts", "--points"}  # fmt: skip
    assert expected <= options


def test_defaults_are_one_run_with_the_launchers_settings(tmp_path):
    args = driver.parse_args(["--out", str(tmp_path), "--phase", "startstop", "--skip", "load"])
    assert args.phases == ["startstop"]
    assert args.settings == [DEFAULT]
    assert args.skip == {"load"}
    assert args.starts == 3


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--phase", "main,nope"], "unknown phase(s) ['nope']"),
        (["--skip", "ceilng"], "unknown part(s) ['ceilng']"),
        (["--mps", "maybe"], "--mps: unknown value(s) ['maybe']"),
        (["--gpu-memory-budget", "lots"], "--gpu-memory-budget: ['lots'] is not auto, off or a size"),
        (["--instances", "sink=2"], "--instances: 'sink=2' is not MODEL=N"),
        (["--mps-threads", "0"], "each percentage must be 1-100"),
        (["--starts", "0"], "--starts must be 1 or more"),
        (["--points", "some"], "invalid choice: 'some'"),
    ],
)
def test_bad_options_are_usage_errors(tmp_path, capsys, argv, message):
    with pytest.raises(SystemExit) as e:
        driver.parse_args(["--out", str(tmp_path), "--phase", "startstop", "--skip", "load", *argv][: 6 if (
            argv[0] == "--skip") else None] + (argv if argv[0] == "--skip" else []))  # fmt: skip
    assert e.value.code == 2
    assert message in capsys.readouterr().err


def test_mps_needs_a_launcher_that_has_it(tmp_path, capsys):
    """With the launcher's ServerOptions.mps the settings are parsed; without it the option is refused."""
    argv = ["--out", str(tmp_path), "--phase", "startstop", "--skip", "load", "--mps", "on,off"]
    if "mps" in {f.name for f in dataclasses.fields(ServerOptions)}:
        assert driver.parse_args(argv).settings == [Setting("on"), Setting("off")]
    else:
        with pytest.raises(SystemExit):
            driver.parse_args(argv)
        assert "has no ServerOptions.mps" in capsys.readouterr().err


def test_perf_analyzer_is_needed_unless_nothing_is_measured_through_triton(tmp_path):
    def needs(*argv: str) -> bool:
        parser_args = build_parser().parse_args(["--out", str(tmp_path), *argv])
        parser_args.phases = parser_args.phase.split(",")
        parser_args.skip = set(filter(None, parser_args.skip.split(",")))
        return driver.needs_perf_analyzer(parser_args)

    assert needs("--phase", "main")
    assert needs("--phase", "startstop")
    assert not needs("--phase", "startstop", "--skip", "load")
    assert needs("--phase", "startstop,classify", "--skip", "load")
    assert not needs("--phase", "main,classify", "--skip", "servers")


# ---------------------------------------------------------------------- settings
def test_settings_are_every_combination_mps_varying_fastest():
    assert parse_settings(None, None) == [DEFAULT]
    assert parse_settings("on,off", "16G,off") == [
        Setting("on", "16G"),
        Setting("off", "16G"),
        Setting("on", "off"),
        Setting("off", "off"),
    ]
    assert parse_settings(None, "16GiB") == [Setting(None, "16GiB")]


def test_a_setting_names_itself_and_its_server_options():
    s = Setting("on", "16G")
    assert s.label == "mps on, budget 16G"
    assert s.suffix == "-mps-on-budget-16G"
    assert s.server_options() == {"mps": "on", "gpu_memory_budget": "16G"}
    assert s.row_fields() == {"setting": "mps on, budget 16G", "mps": "on", "budget": "16G"}
    assert DEFAULT.label == "default" and DEFAULT.suffix == "" and DEFAULT.server_options() == {}
    assert Setting("off").row_fields() == {"setting": "mps off", "mps": "off", "budget": ""}


def test_mps_and_budget_values():
    assert parse_mps(" on , off ") == ["on", "off"]
    assert parse_mps("") == [None]
    for bad in ("yes", "on,on"):
        with pytest.raises(OptionError):
            parse_mps(bad)
    assert parse_budgets("16G,12000M,16GiB,1.5T,auto,off") == ["16G", "12000M", "16GiB", "1.5T", "auto", "off"]
    for bad in ("16Q", "G16", "-1G", "16G,16G"):
        with pytest.raises(OptionError):
            parse_budgets(bad)


def test_the_guard_names_the_missing_field():
    settings = [Setting("on"), Setting("off", "16G")]
    with pytest.raises(
        OptionError, match=r"ServerOptions\.mps, ServerOptions\.gpu_memory_budget .*--mps, --gpu-memory-budget$"
    ):
        check_launcher_supports(settings, fields=["model_repository"])
    with pytest.raises(OptionError, match=r"no ServerOptions\.gpu_memory_budget"):
        check_launcher_supports(settings, fields=["mps"])
    check_launcher_supports(settings, fields=["mps", "gpu_memory_budget"])
    check_launcher_supports([DEFAULT], fields=[])  # the launcher's defaults need nothing


def test_instance_counts_and_their_combinations():
    counts = parse_instances(" classifier=1,2 ; preprocess=2,4;")
    assert counts == {"classifier": [1, 2], "preprocess": [2, 4]}
    grid = instance_grid(counts)
    assert grid == [
        {"preprocess": 2, "classifier": 1},
        {"preprocess": 2, "classifier": 2},
        {"preprocess": 4, "classifier": 1},
        {"preprocess": 4, "classifier": 2},
    ]
    assert instances_label(grid[1]) == "preprocess x2, classifier x2"
    assert instance_grid(parse_instances("")) == [{}]
    assert instances_label({}) == "shipped counts"
    for bad in ("preprocess", "preprocess=0", "preprocess=a", "embedder=2", "preprocess=1;preprocess=2"):
        with pytest.raises(OptionError):
            parse_instances(bad)


def test_percentages_and_skips():
    assert parse_percentages("100, 50") == [100, 50]
    assert parse_percentages(None) == [None]
    for bad in ("0", "101", "half"):
        with pytest.raises(OptionError):
            parse_percentages(bad)
    assert parse_skip("dali,cpu", driver.SKIPPABLE) == {"dali", "cpu"}
    with pytest.raises(OptionError):
        parse_skip("dali,gpu", driver.SKIPPABLE)


def test_tune_grid_is_instances_delay_and_decoders_per_configuration():
    assert parse_tune_grid("2,0,2; 4,0,1") == [(2, 0, 2), (4, 0, 1)]
    assert parse_tune_grid("") == []
    for bad in ("2,0", "2,0,x", "0,0,1", "2,-1,1", "2,0,9"):
        with pytest.raises(OptionError, match="--tune-grid"):
            parse_tune_grid(bad)


def test_a_bad_main_config_is_a_usage_error(tmp_path, capsys):
    with pytest.raises(SystemExit):
        driver.parse_args(["--out", str(tmp_path), "--skip", "servers", "--config", "4,0"])
    assert "--config: '4,0' is not INSTANCES,QUEUE_DELAY_US,HW_DECODERS" in capsys.readouterr().err


# ---------------------------------------------------------------------- repositories
def _group(path: Path) -> str:
    return next(line for line in path.read_text().splitlines() if line.startswith("instance_group"))


def test_the_main_repository_copies_the_shipped_gpu_config(tmp_path):
    shipped = repos.SHIPPED_GPU_CONFIG.read_text()
    repo = repos.make_repo(tmp_path / "repo", queue_delay_us=500, hw_decoders=2)
    assert sorted(p.name for p in repo.iterdir()) == ["null_prep", "null_sink", "prep_sink", "preprocess", "sink"]
    pre = repo / "preprocess" / "config.pbtxt"
    assert not (repo / "preprocess" / "configs").exists()  # the copy is what every server picks
    assert _group(pre) == f"instance_group [ {{ count: {repos.instance_count(shipped)}, kind: KIND_GPU }} ]"
    text = pre.read_text()
    assert "max_queue_delay_microseconds: 500" in text and "max_queue_size: 4096" in text
    assert 'key: "executor" value: { string_value: "gpu" }' in text
    assert 'key: "hw_decoders" value: { string_value: "2" }' in text
    null = (repo / "null_prep" / "config.pbtxt").read_text()
    assert f"count: {repos.instance_count(shipped)}, kind: KIND_GPU" in null
    assert "max_queue_delay_microseconds: 500" in null
    assert _group(repo / "sink" / "config.pbtxt") == "instance_group [ { count: 2, kind: KIND_GPU } ]"
    # PIXELS as the GPU config makes it (FP16 channel-last): what the sink reads and null_prep makes
    for model in ("sink", "null_prep"):
        assert "data_type: TYPE_FP16 dims: [ 224, 224, 3 ]" in (repo / model / "config.pbtxt").read_text()
    assert repos.SHIPPED_GPU_CONFIG.read_text() == shipped


def test_a_repository_with_instance_counts_per_model(tmp_path):
    sources = {p: p.read_text() for p in repos.SOURCE.glob("*/config*.pbtxt")}
    sources |= {p: p.read_text() for p in repos.SOURCE.glob("*/configs/*.pbtxt")}
    counts = {"preprocess": 2, "classifier": 3, "postprocess": 4, "classify_fused": 1}
    repo = repos.make_repo(tmp_path / "repo", with_classify=True, sinks=(), counts=counts)
    with pytest.raises(ValueError, match="not among"):
        repos.make_repo(tmp_path / "bad", sinks=("prep_sink", "nul_sink"))
    assert sorted(p.name for p in repo.iterdir()) == ["classifier", "classify", "classify_fused", "postprocess",
                                                       "preprocess"]  # fmt: skip
    assert repos.repo_counts(repo) == counts
    # every config a server may pick has the count, each keeping its kind
    assert _group(repo / "classifier" / "config.pbtxt") == "instance_group [ { count: 3, kind: KIND_AUTO } ]"
    assert _group(repo / "classifier" / "configs" / "gpu.pbtxt") == "instance_group [ { count: 3, kind: KIND_GPU } ]"
    assert _group(repo / "postprocess" / "config.pbtxt") == "instance_group [ { count: 4, kind: KIND_CPU } ]"
    for cfg in repo.glob("*/config*.pbtxt"):
        assert "max_queue_size: 64\n" not in cfg.read_text(), f"{cfg} keeps the deployed queue bound"
    assert (repo / "classifier" / "1" / "model.onnx").is_file()
    assert all(p.read_text() == text for p, text in sources.items()), "the source repository was written"


def test_null_classify_feeds_the_classifier_what_null_prep_makes(tmp_path):
    """The ensemble parses as Triton parses it, wires null_prep's PIXELS into the classifier's input with the type the
    classifier's GPU config reads, and answers the classify ensemble's outputs; without null_prep or the classify
    models it is refused."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    repo = repos.make_repo(tmp_path / "repo", with_classify=True, sinks=repos.NULL_CLASSIFY_MODELS)
    assert sorted(p.name for p in repo.iterdir()) == ["classifier", "classify", "classify_fused", "null_classify",
                                                       "null_prep", "postprocess", "preprocess"]  # fmt: skip

    def parse(path: Path) -> model_config_pb2.ModelConfig:
        return text_format.Parse(path.read_text(), model_config_pb2.ModelConfig())

    null, classify = parse(repo / "null_classify" / "config.pbtxt"), parse(repo / "classify" / "config.pbtxt")
    steps = null.ensemble_scheduling.step
    assert [s.model_name for s in steps] == ["null_prep", "classifier"]
    assert steps[1].input_map["input"] == steps[0].output_map["PIXELS"]
    assert [(o.name, o.data_type) for o in null.output] == [(o.name, o.data_type) for o in classify.output]
    assert dict(steps[1].output_map) == dict(classify.ensemble_scheduling.step[1].output_map)
    made = parse(repo / "null_prep" / "config.pbtxt").output[0].data_type
    read = parse(repo / "classifier" / "configs" / "gpu.pbtxt").input[0].data_type
    assert made == read == model_config_pb2.DataType.Value("TYPE_FP16")
    for sinks, with_classify in ((("null_classify",), True), (repos.NULL_CLASSIFY_MODELS, False)):
        with pytest.raises(ValueError, match="null_classify"):
            repos.make_repo(tmp_path / "bad", with_classify=with_classify, sinks=sinks)


def test_counts_for_models_the_repository_lacks_are_refused(tmp_path):
    with pytest.raises(ValueError, match="classifier"):
        repos.make_repo(tmp_path / "repo", counts={"classifier": 2})
    with pytest.raises(ValueError, match="embedder"):
        repos.make_repo(tmp_path / "repo", with_classify=True, counts={"embedder": 2})


def test_setting_counts_never_writes_through_a_link(tmp_path):
    source = tmp_path / "source.pbtxt"
    source.write_text('name: "m"\ninstance_group [ { count: 4, kind: KIND_GPU } ]\n')
    model = tmp_path / "m"
    (model / "configs").mkdir(parents=True)
    (model / "config.pbtxt").write_text('name: "m"\ninstance_group [ { count: 1, kind: KIND_AUTO } ]\n')
    (model / "configs" / "gpu.pbtxt").symlink_to(source)
    repos.set_instance_count(model, 6)
    assert "count: 4, kind: KIND_GPU" in source.read_text()
    assert not (model / "configs" / "gpu.pbtxt").is_symlink()
    assert _group(model / "configs" / "gpu.pbtxt") == "instance_group [ { count: 6, kind: KIND_GPU } ]"
    assert _group(model / "config.pbtxt") == "instance_group [ { count: 6, kind: KIND_AUTO } ]"


def test_instance_group_edits():
    text = "a\ninstance_group [ { count: 2, kind: KIND_CPU } ]\nb\n"
    assert repos.instance_count(text) == 2
    assert repos.with_instances(text, 5) == "a\ninstance_group [ { count: 5, kind: KIND_CPU } ]\nb\n"
    assert repos.with_instances(text, 5, "KIND_GPU").count("count: 5, kind: KIND_GPU") == 1
    with pytest.raises(ValueError):
        repos.instance_count("name: x\n")


def test_every_config_of_a_benchmark_repository_is_a_triton_model_config(tmp_path):
    """Parsed as Triton parses them (model_config.proto): the edits keep each config valid, and the counts read
    back are those asked for, in the config a GPU server picks and in config.pbtxt."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    from scripts.bench import decode_once

    counts = {"preprocess": 3, "classifier": 2, "postprocess": 5, "classify_fused": 6}
    repo = repos.make_repo(tmp_path / "repo", with_classify=True, counts=counts, queue_delay_us=250)
    decode_once.add_models(repo, repos.SOURCE)
    parsed = {}
    for cfg in sorted(repo.glob("*/config.pbtxt")) + sorted(repo.glob("*/configs/*.pbtxt")):
        parsed[cfg.relative_to(repo)] = text_format.Parse(cfg.read_text(), model_config_pb2.ModelConfig())
    for model, n in counts.items():
        for rel, cfg in parsed.items():
            if rel.parts[0] == model and cfg.backend == "python":
                assert [g.count for g in cfg.instance_group] == [n], rel
    gpu = model_config_pb2.ModelInstanceGroup.Kind.Value("KIND_GPU")
    assert parsed[Path("null_prep/config.pbtxt")].instance_group[0].count == 3
    assert parsed[Path("null_prep/config.pbtxt")].dynamic_batching.max_queue_delay_microseconds == 250
    assert parsed[Path("sink/config.pbtxt")].instance_group[0].kind == gpu
    for rel, cfg in parsed.items():
        if cfg.HasField("dynamic_batching") and cfg.dynamic_batching.HasField("default_queue_policy"):
            assert cfg.dynamic_batching.default_queue_policy.max_queue_size == 4096, rel


# ---------------------------------------------------------------------- the instances and gpus phases' servers
def _queues(repo: Path, pool_mb: int) -> dict[str, int]:
    """Every admitted queue (requests) of ``repo`` served on one GPU with a CUDA pool of ``pool_mb``: the launcher's
    own admission on the benchmark copy's GPU configs."""
    from tritonprep.launcher.served import admission_of, read_models

    return {q.model: q.max_queue_size for q in admission_of(read_models(repo, "gpu"), pool_mb, 1).queues}


def _classifier_queue(repo: Path, pool_mb: int) -> int:
    """The classifier's admitted queue (requests) of ``repo`` (:func:`_queues`)."""
    return _queues(repo, pool_mb)["classifier"]


def test_with_prep_sink_the_instances_server_gets_the_pool_its_sink_shares(tmp_path):
    """The sink is a second consumer of PIXELS: with the harness's pool it halved the classifier's queue and its own,
    and 8 images/request at c=64 was refused; twice the pool gives them the queue the classifier gets alone."""
    import argparse

    from scripts.bench.harness.phases import instances
    from scripts.bench.harness.serving import BENCH_OPTIONS

    alone = argparse.Namespace(instance_models="classify,classify_fused")
    both = argparse.Namespace(instance_models="classify,prep_sink")
    assert instances.server_options(alone) is None  # the harness's own
    pool = int(BENCH_OPTIONS["cuda_memory_pool_mb"])
    grown = instances.server_options(both)
    assert grown == {**BENCH_OPTIONS, "cuda_memory_pool_mb": 2 * pool}
    reference = _classifier_queue(instances.instances_repo(tmp_path / "alone", alone, {}), pool)
    with_sink = instances.instances_repo(tmp_path / "both", both, {})
    assert _classifier_queue(with_sink, pool) < reference / 2  # what the harness's pool gave (44 against 97)
    assert _classifier_queue(with_sink, grown["cuda_memory_pool_mb"]) >= reference
    assert reference >= 64  # the c=64 point's requests fit the classifier's queue of the classify-only copy
    # the embedder's queue is another consumer: the pool once more for it, and for each one measured
    embed = argparse.Namespace(instance_models="classify,embed")
    assert instances.server_options(embed) == grown
    all_three = argparse.Namespace(instance_models="classify,prep_sink,embed")
    assert instances.server_options(all_three) == {**BENCH_OPTIONS, "cuda_memory_pool_mb": 3 * pool}
    queues = _queues(instances.instances_repo(tmp_path / "embed", embed, {}), grown["cuda_memory_pool_mb"])
    assert queues["classifier"] >= 64 and queues["embedder"] >= 64


def test_the_gpus_phase_server_admits_the_c64_points_of_its_opened_copy(tmp_path):
    """The gpus phase serves the shipped repository with its queues opened up: in the launcher's pool the classifier
    and the embedder shared it evenly (31 requests each) and 8 images/request at c=64 was refused; its server gets
    twice the pool, and each admits a c=64 point's requests."""
    from scripts.bench.harness.phases import gpus
    from tritonprep.launcher.options import ServerOptions

    assert gpus.server_options(0) == {}  # the CPU host: the launcher's own
    options = gpus.server_options(2)
    assert options["gpus"] == (0, 1) and options["queue_timeout_ms"] == 0
    assert options["cuda_memory_pool_mb"] == 2 * ServerOptions.cuda_memory_pool_mb
    repo = repos.open_copy(tmp_path / "open")
    default = _queues(repo, ServerOptions.cuda_memory_pool_mb)
    assert default["classifier"] < 64 and default["embedder"] < 64  # what refused the c=64 points
    grown = _queues(repo, int(options["cuda_memory_pool_mb"]))
    assert grown["classifier"] >= 64 and grown["embedder"] >= 64
