"""scripts.bench.gpu_time's arithmetic on a CUPTI trace (the GPU parts run on the GPU machine only)."""

from __future__ import annotations

import pytest

from scripts.bench.gpu_time import shipped_parameters, summarize_trace, union_us


def test_union_merges_overlapping_and_nested_intervals() -> None:
    assert union_us([(0, 10), (5, 15), (6, 7), (20, 25)]) == 20
    assert union_us([]) == 0


def test_trace_summary_per_image() -> None:
    events = [
        {"ph": "X", "cat": "kernel", "name": "resize", "ts": 0, "dur": 30, "args": {"est. achieved occupancy %": 50}},
        {"ph": "X", "cat": "kernel", "name": "resize", "ts": 100, "dur": 10, "args": {"est. achieved occupancy %": 90}},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pinned -> Device)", "ts": 20, "dur": 20},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 0, "dur": 500},  # host side: not counted
    ]
    s = summarize_trace(events, images=10, wall_s=0.001)
    assert s["wall_us_per_image"] == 100
    assert s["gpu_busy_us_per_image"] == 5  # [0, 40] and [100, 110]
    assert s["sum_us_per_image"] == {"kernel": 4, "gpu_memcpy": 2}
    top = s["by_name"][0]
    assert (top["name"], top["us_per_image"], top["calls"], top["occupancy_pct"]) == ("resize", 4, 2, 60)


def test_shipped_parameters_read_the_gpu_config() -> None:
    params = shipped_parameters()
    assert params["resize_shorter"] == "256"
    assert params["EMBED_PIXELS.interpolation"] == "bicubic"


def test_instance_models_option() -> None:
    import argparse

    from scripts.bench.harness.phases.instances import models_of

    assert models_of(argparse.Namespace(instance_models="classify")) == ["classify"]
    assert models_of(argparse.Namespace(instance_models="classify_fused, classify")) == ["classify", "classify_fused"]
    assert models_of(argparse.Namespace(instance_models="")) == ["classify", "classify_fused"]
    assert models_of(argparse.Namespace(instance_models="prep_sink,classify")) == ["classify", "prep_sink"]
    assert models_of(argparse.Namespace(instance_models="null_classify,classify")) == ["classify", "null_classify"]
    with pytest.raises(ValueError, match="unknown model"):
        models_of(argparse.Namespace(instance_models="classifier"))


def test_instances_repo_holds_prep_sink_only_where_measured(tmp_path) -> None:
    import argparse

    from scripts.bench.harness.phases.instances import instances_repo

    plain = instances_repo(tmp_path / "plain", argparse.Namespace(instance_models=""), {})
    assert (plain / "classify").is_dir() and not (plain / "prep_sink").exists() and not (plain / "sink").exists()
    both = instances_repo(tmp_path / "both", argparse.Namespace(instance_models="classify,prep_sink"), {})
    assert (both / "prep_sink").is_dir() and (both / "sink").is_dir() and (both / "classify").is_dir()
    assert not (both / "null_prep").exists() and not (both / "null_sink").exists()
    null = instances_repo(tmp_path / "null", argparse.Namespace(instance_models="null_classify"), {})
    assert (null / "null_classify").is_dir() and (null / "null_prep").is_dir() and not (null / "prep_sink").exists()


def _stats(executes: int, images: int, infer_ns: int) -> dict:
    """Triton's statistics of a model whose executes all had batch size 100 (batch_stats count executes)."""
    zero = {"count": executes, "ns": 0}
    batch = {"batch_size": 100, "compute_input": zero, "compute_infer": {"count": executes, "ns": infer_ns},
             "compute_output": zero}  # fmt: skip
    return {"execution_count": executes, "inference_count": images, "batch_stats": [batch]}


def test_executes_summary_between_two_snapshots() -> None:
    from scripts.perf_sweep import executes_summary

    before = {"classifier": _stats(10, 1000, 10_000_000), "idle": _stats(3, 3, 0)}
    after = {"classifier": _stats(20, 3000, 210_000_000), "idle": _stats(3, 3, 0)}
    # 10 executes of 200 images between the snapshots took 200 ms of compute infer: 20 ms each
    assert executes_summary(before, after, ["classifier", "idle", "absent"]) == (
        "classifier: 200.0 img/execute, compute in 0.00 / infer 20.00 / out 0.00 ms"
    )


def test_classifier_batching_axis_drops_preferred_sizes_from_a_copy(tmp_path) -> None:
    import argparse
    import shutil

    from scripts.bench.harness.phases.instances import batchings_of
    from scripts.bench.harness.repos import without_preferred_batch_sizes
    from tritonprep_testkit.servers import REPO

    assert batchings_of(argparse.Namespace(classifier_batching="shipped,none")) == ["shipped", "none"]
    with pytest.raises(ValueError, match="unknown value"):
        batchings_of(argparse.Namespace(classifier_batching="off"))
    model = tmp_path / "classifier"
    shutil.copytree(REPO / "model_repository" / "classifier", model, ignore=shutil.ignore_patterns("*.onnx*", "1"))
    shipped = (model / "configs" / "gpu.pbtxt").read_text()
    assert "preferred_batch_size: [ 64, 128 ]" in shipped
    without_preferred_batch_sizes(model)
    text = (model / "configs" / "gpu.pbtxt").read_text()
    assert "preferred_batch_size" not in text and "max_queue_delay_microseconds: 0" in text
    assert (REPO / "model_repository" / "classifier" / "configs" / "gpu.pbtxt").read_text() == shipped


def test_classifier_batching_delay_sets_the_queue_delay_in_a_copy(tmp_path) -> None:
    import argparse
    import shutil

    from scripts.bench.harness.phases.instances import batchings_of, queue_delay_us
    from scripts.bench.harness.repos import with_queue_delay
    from tritonprep_testkit.servers import REPO

    given = argparse.Namespace(classifier_batching="shipped,delay2000,none")
    assert batchings_of(given) == ["shipped", "delay2000", "none"]
    assert [queue_delay_us(b) for b in batchings_of(given)] == [None, 2000, None]
    with pytest.raises(ValueError, match="unknown value"):
        batchings_of(argparse.Namespace(classifier_batching="delay"))
    model = tmp_path / "classifier"
    shutil.copytree(REPO / "model_repository" / "classifier", model, ignore=shutil.ignore_patterns("*.onnx*", "1"))
    shipped = (model / "configs" / "gpu.pbtxt").read_text()
    with_queue_delay(model, 2000)
    text = (model / "configs" / "gpu.pbtxt").read_text()
    assert "max_queue_delay_microseconds: 2000" in text and "preferred_batch_size: [ 64, 128 ]" in text
    assert text.replace("max_queue_delay_microseconds: 2000", "max_queue_delay_microseconds: 0") == shipped
    assert (REPO / "model_repository" / "classifier" / "configs" / "gpu.pbtxt").read_text() == shipped
    with pytest.raises(ValueError, match="max_queue_delay_microseconds"):
        with_queue_delay(tmp_path / "nothing", 10)


def test_classifier_turns_axis_sets_network_turns_off_in_a_copy(tmp_path) -> None:
    import argparse
    import shutil

    from scripts.bench.harness.phases.instances import plan, turns_of
    from scripts.bench.harness.repos import with_parameter
    from tritonprep_testkit.servers import REPO

    assert turns_of(argparse.Namespace(classifier_turns="shipped,off")) == ["shipped", "off"]
    with pytest.raises(ValueError, match="unknown value"):
        turns_of(argparse.Namespace(classifier_turns="none"))
    combos = plan(
        argparse.Namespace(instances="", mps_threads="", classifier_batching="", classifier_turns="shipped,off")
    )
    assert [c[3] for c in combos] == ["shipped", "off"]
    model = tmp_path / "classifier"
    shutil.copytree(REPO / "model_repository" / "classifier", model, ignore=shutil.ignore_patterns("*.onnx*", "1"))
    line = 'parameters { key: "network_turns" value: { string_value: "ordered" } }'
    assert line in (model / "configs" / "gpu.pbtxt").read_text() and line in (model / "config.pbtxt").read_text()
    with_parameter(model, "network_turns", "off")
    for cfg in (model / "configs" / "gpu.pbtxt", model / "config.pbtxt"):
        assert line.replace('"ordered"', '"off"') in cfg.read_text() and line not in cfg.read_text()
    assert line in (REPO / "model_repository" / "classifier" / "configs" / "gpu.pbtxt").read_text()  # the source stays
    with pytest.raises(ValueError, match="no config declares"):
        with_parameter(model, "no_such_parameter", "x")
    with_parameter(model, "hw_decoder", "false", add=True)  # a parameter left at its default: appended to each
    for cfg in (model / "configs" / "gpu.pbtxt", model / "config.pbtxt"):
        assert cfg.read_text().endswith('parameters { key: "hw_decoder" value: { string_value: "false" } }\n')
    with_parameter(model, "hw_decoder", "true", add=True)  # once there, set in place
    assert (model / "config.pbtxt").read_text().count('key: "hw_decoder"') == 1


def test_classifier_parameter_axis_serves_one_copy_per_value() -> None:
    import argparse

    from scripts.bench.harness.phases.instances import parameter_axis, plan

    none = argparse.Namespace(instances="", mps_threads="", classifier_batching="", classifier_turns="")
    assert parameter_axis(none) == ("", ["shipped"]) and [c[4] for c in plan(none)] == ["shipped"]
    given = argparse.Namespace(**vars(none), classifier_parameter="fuse_conv_bias=shipped, true")
    assert parameter_axis(given) == ("fuse_conv_bias", ["shipped", "true"])
    assert [c[4] for c in plan(given)] == ["shipped", "true"]
    lists = argparse.Namespace(classifier_parameter="batch_buckets=shipped,1+64,8+64")  # a value's commas as +
    assert parameter_axis(lists) == ("batch_buckets", ["shipped", "1,64", "8,64"])
    for bad in ("fuse_conv_bias", "=true", "fuse_conv_bias="):
        with pytest.raises(ValueError, match="KEY=VALUE"):
            parameter_axis(argparse.Namespace(classifier_parameter=bad))
    with pytest.raises(ValueError, match="declares no parameter 'fuse_conv_bais'"):  # before any server runs
        parameter_axis(argparse.Namespace(classifier_parameter="fuse_conv_bais=true"))
    other = argparse.Namespace(classifier_parameter="preprocess:mps_active_thread_percentage=shipped,40")
    assert parameter_axis(other) == ("preprocess:mps_active_thread_percentage", ["shipped", "40"])
    with pytest.raises(ValueError, match="the preprocess's GPU config declares no parameter 'batch_buckets'"):
        parameter_axis(argparse.Namespace(classifier_parameter="preprocess:batch_buckets=1"))
    decoder = argparse.Namespace(classifier_parameter="preprocess:hw_decoder=shipped,false")  # left at its default
    assert parameter_axis(decoder) == ("preprocess:hw_decoder", ["shipped", "false"])
    priority = argparse.Namespace(classifier_parameter="mps_client_priority=shipped,1")  # the network's, undeclared
    assert parameter_axis(priority) == ("mps_client_priority", ["shipped", "1"])
    with pytest.raises(ValueError, match="the classify_fused's GPU config declares no parameter 'mps_client_priority'"):
        parameter_axis(argparse.Namespace(classifier_parameter="classify_fused:mps_client_priority=1"))


def test_classifier_parameters_joined_by_semicolons_vary_together(tmp_path) -> None:
    import argparse
    import shutil

    from scripts.bench.harness.phases.instances import parameter_axis, set_parameter
    from tritonprep_testkit.servers import REPO

    both = "preprocess:hw_decoders=shipped,2,2; preprocess:hw_decoder_prealloc=shipped,shipped,1024+768+32"
    keys, values = parameter_axis(argparse.Namespace(classifier_parameter=both))
    assert keys == "preprocess:hw_decoders;preprocess:hw_decoder_prealloc"
    assert values == ["shipped", "2;shipped", "2;1024,768,32"]
    with pytest.raises(ValueError, match="as many values each"):
        parameter_axis(argparse.Namespace(classifier_parameter="preprocess:hw_decoders=shipped,2;fuse_conv_bias=true"))
    with pytest.raises(ValueError, match="declares no parameter 'fuse_conv_bais'"):
        parameter_axis(argparse.Namespace(classifier_parameter="fuse_conv_bias=true;fuse_conv_bais=true"))
    shutil.copytree(REPO / "model_repository" / "preprocess", tmp_path / "preprocess", symlinks=True)
    assert set_parameter(tmp_path, keys, values[1]) == ["preprocess"]  # hw_decoders only: the other stays shipped
    prep = (tmp_path / "preprocess" / "configs" / "gpu.pbtxt").read_text()
    assert 'key: "hw_decoders" value: { string_value: "2" }' in prep and 'key: "hw_decoder_prealloc"' not in prep
    assert set_parameter(tmp_path, keys, values[2]) == ["preprocess"]
    prep = (tmp_path / "preprocess" / "configs" / "gpu.pbtxt").read_text()
    assert 'key: "hw_decoder_prealloc" value: { string_value: "1024,768,32" }' in prep


def test_classifier_parameter_reaches_classify_fused_network_too(tmp_path) -> None:
    import shutil

    from scripts.bench.harness.phases.instances import set_parameter
    from tritonprep_testkit.servers import REPO

    for model in ("classifier", "classify_fused"):
        shutil.copytree(REPO / "model_repository" / model, tmp_path / model, symlinks=True,
                        ignore=shutil.ignore_patterns("*.onnx*", "1"))  # fmt: skip
    assert set_parameter(tmp_path, "fuse_conv_bias", "true") == ["classifier", "classify_fused"]
    assert set_parameter(tmp_path, "mps_client_priority", "1") == ["classifier"]  # added: the classifier's alone
    assert (
        'key: "mps_client_priority" value: { string_value: "1" }'
        in (tmp_path / "classifier" / "configs" / "gpu.pbtxt").read_text()
    )
    assert "mps_client_priority" not in (tmp_path / "classify_fused" / "configs" / "gpu.pbtxt").read_text()
    assert 'key: "fuse_conv_bias" value: { string_value: "true" }' in (tmp_path / "classifier/config.pbtxt").read_text()
    fused = (tmp_path / "classify_fused" / "configs" / "gpu.pbtxt").read_text()
    assert 'key: "network.fuse_conv_bias" value: { string_value: "true" }' in fused
    assert set_parameter(tmp_path, "classifier:fuse_conv_bias", "1,64") == ["classifier"]  # the classifier's alone
    assert 'key: "fuse_conv_bias" value: { string_value: "1,64" }' in (tmp_path / "classifier/config.pbtxt").read_text()
    assert (tmp_path / "classify_fused" / "configs" / "gpu.pbtxt").read_text() == fused  # its network untouched
    assert set_parameter(tmp_path, "network_turns", "off") == ["classifier"]  # classify_fused has no such parameter
    shutil.copytree(REPO / "model_repository" / "preprocess", tmp_path / "preprocess", symlinks=True)
    assert set_parameter(tmp_path, "preprocess:mps_active_thread_percentage", "40") == ["preprocess"]  # that model only
    prep = (tmp_path / "preprocess" / "configs" / "gpu.pbtxt").read_text()
    assert 'key: "mps_active_thread_percentage" value: { string_value: "40" }' in prep
    assert "mps_active_thread_percentage" not in (tmp_path / "classify_fused" / "configs" / "gpu.pbtxt").read_text()


def test_a_classifier_parameter_labels_the_classify_rows_too() -> None:
    from scripts.bench.harness.phases.instances import changes

    # the classify ensemble runs the classifier: its rows of each value must not share one label (and overwrite)
    assert changes("classify", ["classifier"]) and changes("classify_fused", ["classifier", "classify_fused"])
    assert not changes("classify_fused", ["classifier"]) and not changes("classify", [])


def test_classifier_batching_refuses_a_preferred_line_it_cannot_read(tmp_path) -> None:
    from scripts.bench.harness.repos import without_preferred_batch_sizes

    (tmp_path / "config.pbtxt").write_text("dynamic_batching {\n  preferred_batch_size: 64\n}\n")
    without_preferred_batch_sizes(tmp_path)  # a scalar is read and dropped
    assert "preferred_batch_size" not in (tmp_path / "config.pbtxt").read_text()
    (tmp_path / "config.pbtxt").write_text("dynamic_batching {\n  preferred_batch_size [ 64 ]\n}\n")
    with pytest.raises(ValueError, match="cannot read"):
        without_preferred_batch_sizes(tmp_path)


def test_embedder_parameters_need_embed_measured_and_label_its_rows(tmp_path) -> None:
    import argparse

    from scripts.bench.harness.phases.instances import changes, instances_repo, parameter_axis, set_parameter

    axis = parameter_axis(argparse.Namespace(classifier_parameter="embedder:fuse_conv_bias=shipped,1+64"))
    assert axis == ("embedder:fuse_conv_bias", ["shipped", "1,64"])
    plain = instances_repo(tmp_path / "plain", argparse.Namespace(instance_models="classify"), {})
    assert not (plain / "embedder").exists()
    with pytest.raises(ValueError, match="this copy has no embedder; name a model that runs it in --instance-models"):
        set_parameter(plain, "embedder:fuse_conv_bias", "1,64")
    repo = instances_repo(tmp_path / "embed", argparse.Namespace(instance_models="classify,embed"), {})
    assert {"embedder", "embed", "classifier", "classify", "preprocess"} <= {p.name for p in repo.iterdir()}
    shipped_classifier = (repo / "classifier" / "configs" / "gpu.pbtxt").read_text()
    assert set_parameter(repo, "embedder:fuse_conv_bias", "1,64") == ["embedder"]
    assert 'key: "fuse_conv_bias" value: { string_value: "1,64" }' in (repo / "embedder/configs/gpu.pbtxt").read_text()
    assert (repo / "classifier" / "configs" / "gpu.pbtxt").read_text() == shipped_classifier
    assert changes("embed", ["embedder"]) and not changes("classify", ["embedder"])
    assert changes("embed", ["preprocess"]) and not changes("embed", ["classifier"])
