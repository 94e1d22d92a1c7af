"""The classifier's runtime choice on a machine without a GPU: options, FP16 variant, the CPU fallback line."""

from __future__ import annotations

import logging
import shutil

import numpy as np
import pytest

from tritonprep.classifier.runtimes import RuntimeOptions, load_runtime
from tritonprep.errors import ConfigError
from tritonprep.network_files import channels_last, model_file
from tritonprep_testkit.onnx_graphs import network as onnx_network
from tritonprep_testkit.servers import ONNX

DIMS = (3, 224, 224)


def test_defaults_are_the_fast_gpu_configuration_with_power_of_two_buckets():
    o = RuntimeOptions.from_parameters({}, 256)
    assert (o.runtime, o.precision, o.layout, o.cuda_graphs) == ("auto", "fp16", "nhwc", True)
    assert o.batch_buckets == (1, 2, 4, 8, 16, 32, 64, 128, 256)
    assert RuntimeOptions.from_parameters({}, 100).batch_buckets == (1, 2, 4, 8, 16, 32, 64, 100)


def test_buckets_may_stop_below_max_batch_size_larger_batches_run_in_chunks():
    assert RuntimeOptions.from_parameters({"batch_buckets": "1,8,64"}, 256).batch_buckets == (1, 8, 64)


def test_late_buckets_are_smaller_sizes_the_fused_ones_may_name():
    options = RuntimeOptions.from_parameters(
        {"batch_buckets": "8,64", "late_batch_buckets": "1,16", "fuse_conv_bias": "1,64"}, 256
    )
    assert options.late_batch_buckets == (1, 16) and options.ep.fuses(1) and not options.ep.fuses(8)
    assert options.budget_mb is None and RuntimeOptions.from_parameters({}, 256).late_batch_buckets == ()


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"precision": "int8"}, "precision"),
        ({"layout": "chw"}, "layout"),
        ({"cuda_graphs": "yes"}, "true or false"),
        ({"batch_buckets": "1,4,2,256"}, "increasing"),
        ({"batch_buckets": "1,2,512"}, "up to max_batch_size"),
        ({"batch_buckets": "0,2,4"}, "positive"),
        ({"gpu_mem_limit_mb": "lots"}, "whole number"),
        ({"warp_speed": "9"}, "unknown classifier parameter"),
        ({"batch_buckets": "8,64", "late_batch_buckets": "8"}, "below the largest of batch_buckets"),
        ({"batch_buckets": "8,64", "late_batch_buckets": "1,128"}, "below the largest of batch_buckets"),
        ({"batch_buckets": "8,64", "late_batch_buckets": "4,1"}, "late_batch_buckets must be increasing"),
        ({"batch_buckets": "8,64", "fuse_conv_bias": "1,64"}, "neither batch_buckets"),
    ],
)
def test_bad_parameters_say_what_is_allowed(params, message):
    with pytest.raises(ConfigError, match=message):
        RuntimeOptions.from_parameters(params, 256)


def test_a_missing_fp16_variant_runs_fp32_and_says_so(tmp_path, caplog):
    onnx = tmp_path / "model.onnx"
    shutil.copy(ONNX, onnx)
    with caplog.at_level(logging.WARNING):
        assert model_file(onnx, "fp16") == onnx
    assert "has no FP16 variant" in caplog.text
    (tmp_path / "model.fp16.onnx").write_bytes(b"x")
    assert model_file(onnx, "fp16") == tmp_path / "model.fp16.onnx"
    assert model_file(onnx, "fp32") == onnx


def test_a_gpu_instance_without_the_gpu_build_runs_on_the_cpu_with_one_line_saying_what_to_install(caplog):
    ort = pytest.importorskip("onnxruntime")
    if "CUDAExecutionProvider" in ort.get_available_providers():
        pytest.skip("this machine has ONNX Runtime's GPU build")
    with caplog.at_level(logging.WARNING):
        rt = load_runtime(ONNX, DIMS, device_id=0, use_gpu=True, max_batch=8)
    assert rt.name == "onnxruntime-cpu" and not rt.on_gpu
    lines = [r.getMessage() for r in caplog.records if "runs on the CPU" in r.getMessage()]
    assert len(lines) == 1 and "gpu-cu13" in lines[0]
    x = np.zeros((2, *DIMS), np.float32)
    assert rt.infer_many([x[:1], x[1:]]).shape == (2, 1000)


def test_the_runtime_parameter_table_is_the_one_source_of_names_and_defaults():
    """Each RuntimeOptions field has one row; the rows' defaults build the dataclass's defaults."""
    from dataclasses import fields

    from tritonprep.classifier.runtimes import RUNTIME_PARAMETERS, default_buckets, runtime_parameter_table

    assert sorted(t for p in RUNTIME_PARAMETERS for t in p.targets) == sorted(f.name for f in fields(RuntimeOptions))
    from_table = RuntimeOptions.from_parameters({p.name: p.default for p in RUNTIME_PARAMETERS}, 256)
    assert from_table == RuntimeOptions(batch_buckets=default_buckets(256))
    table = runtime_parameter_table()
    assert all(f"| `{p.name}` | `{p.default}` |" in table for p in RUNTIME_PARAMETERS if p.default)
    assert "| `batch_buckets` | (empty) |" in table


def test_a_model_file_onnx_runtime_cannot_read_is_named_not_the_gpu_install(tmp_path):
    from tritonprep.classifier.ort_options import GPU_INSTALL_HINT, session_error

    bad = tmp_path / "model.b8.onnx"
    err = session_error(bad, ["InvalidProtobuf: [ONNXRuntimeError] : 7 : INVALID_PROTOBUF : Load model failed"])
    assert str(bad) in str(err) and "make model" in str(err) and GPU_INSTALL_HINT not in str(err)
    err = session_error(bad, ["RuntimeException: libcudnn.so.9: cannot open shared object file"], "cuDNN missing")
    assert GPU_INSTALL_HINT in str(err) and "cuDNN missing" in str(err)


def test_run_options_leave_the_stream_to_the_runtime_and_name_the_default_graph():
    ort = pytest.importorskip("onnxruntime")
    from tritonprep.classifier.ort_options import run_options

    options = run_options(ort)
    assert options.get_run_config_entry("disable_synchronize_execution_providers") == "1"
    # ONNX Runtime's Python run_with_iobinding reads this on every run: a missing entry raises inside the lookup
    assert options.get_run_config_entry("gpu_graph_id") == "0"


NHWC = (224, 224, 3)


def test_a_channel_last_input_runs_the_channel_last_variant_where_it_is_there(tmp_path):
    onnx = tmp_path / "model.onnx"
    onnx.write_bytes(b"x")
    (tmp_path / "model.fp16.onnx").write_bytes(b"x")
    # no variant: the file as the precision picks it (a network whose own input is channel-last, as `model add`'s)
    assert model_file(onnx, "fp16", NHWC) == tmp_path / "model.fp16.onnx"
    (tmp_path / "model.fp16.nhwc.onnx").write_bytes(b"x")
    assert model_file(onnx, "fp16", NHWC) == tmp_path / "model.fp16.nhwc.onnx"
    assert model_file(onnx, "fp16", DIMS) == tmp_path / "model.fp16.onnx"  # NCHW: as before
    assert model_file(onnx, "fp32", NHWC) == onnx  # the variant is FP16


@pytest.mark.parametrize(
    ("dims", "last"),
    [((224, 224, 3), True), ((260, 260, 1), True), ((3, 224, 224), False), ((1, 28, 28), False),
     (("224", "224", "3"), True), (("h", "w", 3), True), ((3, "h", "w"), False), ((224, 224), False),
     ((224, 224, 4), False)],
)  # fmt: skip
def test_channel_last_dims_are_an_images_height_width_and_channels(dims, last):
    assert channels_last(dims) is last


def test_tensorrt_asked_for_the_channel_last_variant_is_refused_by_name():
    with pytest.raises(ConfigError, match=r"runtime=tensorrt .* declare the input NCHW, not \[224, 224, 3\]"):
        load_runtime(ONNX, NHWC, prefer="tensorrt", use_gpu=True, max_batch=8)


def test_a_channel_last_network_on_the_cpu_takes_its_rows_as_they_are(tmp_path):
    """A network whose own input is channel-last (no transpose: the session would refuse NCHW rows)."""
    pytest.importorskip("onnxruntime")
    net = onnx_network(tmp_path / "model.onnx", ("batch", *NHWC), 4)
    rt = load_runtime(net, NHWC, use_gpu=False, max_batch=8)
    assert rt.to_network is None
    assert rt.infer(np.ones((2, *NHWC), np.float16)).shape == (2, 4)


def test_a_gpu_config_instance_on_the_cpu_takes_its_channel_last_fp16_rows():
    """The GPU config declares FP16 NHWC; an instance that falls back to the CPU runs model.onnx (NCHW FP32) on the
    same rows transposed: the logits of the NCHW rows."""
    ort = pytest.importorskip("onnxruntime")
    if "CUDAExecutionProvider" in ort.get_available_providers():
        pytest.skip("this machine has ONNX Runtime's GPU build")
    pixels = np.random.default_rng(0).standard_normal((2, *DIMS)).astype(np.float16)
    nchw = load_runtime(ONNX, DIMS, use_gpu=False, max_batch=8)
    nhwc = load_runtime(ONNX, NHWC, use_gpu=True, max_batch=8)
    assert nhwc.name == "onnxruntime-cpu"
    want = nchw.infer(pixels.astype(np.float32))
    got = nhwc.infer_many([pixels[:1].transpose(0, 2, 3, 1), pixels[1:].transpose(0, 2, 3, 1)])
    np.testing.assert_array_equal(got, want)
