"""Admission sized to GPU memory (tritonprep.launcher.admission, pure) on the shipped GPU configs and on small
made-up repositories: no GPU, no Triton. tests/e2e/test_overload.py drives a real server past its peak."""

from __future__ import annotations

from pathlib import Path

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from tritonprep.errors import ServerError
from tritonprep.launcher import admission
from tritonprep.launcher.served import ModelFile, admission_of, read_models, serve_copy

REPO = Path(__file__).resolve().parents[2] / "model_repository"
GPU_KINDS = (model_config_pb2.ModelInstanceGroup.KIND_AUTO, model_config_pb2.ModelInstanceGroup.KIND_GPU)


def config(text: str) -> model_config_pb2.ModelConfig:
    c = model_config_pb2.ModelConfig()
    text_format.Parse(text, c)
    return c


def pool_holding(a: admission.Admission, configs: dict) -> int:
    """The bytes the worst case holds in one GPU's pool, from the served configs themselves (``a`` applied to a
    copy): every instance of a producer executing its largest batch, every instance of a consumer too, and every
    consumer's queue full of the largest requests. Each handed tensor counts once, however many ensembles hand it."""
    served = {}
    for name, c in configs.items():
        served[name] = model_config_pb2.ModelConfig()
        served[name].CopyFrom(c)
        admission.apply(served[name], name, a)
    outputs = {(h.producer, h.output): h.bytes_per_image for h in a.hops}
    inputs = {(h.consumer, h.input): h.bytes_per_image for h in a.hops}

    def instances(name: str) -> int:
        return sum(g.count for g in served[name].instance_group)

    held = sum(instances(p) * served[p].max_batch_size * b for (p, _), b in outputs.items())
    for (c, _), b in inputs.items():
        queue = served[c].dynamic_batching.default_queue_policy.max_queue_size // a.gpus
        held += (instances(c) * served[c].max_batch_size + queue * a.largest_request) * b
    return held


def shipped() -> dict[str, model_config_pb2.ModelConfig]:
    return {m.model: m.config for m in read_models(REPO, "gpu")}


@pytest.mark.parametrize("pool_mb", [1024, 1536, 2048])
def test_the_shipped_gpu_repository_fits_its_pool_in_the_worst_case(pool_mb):
    configs = shipped()
    a = admission.plan(configs, pool_mb, 1, GPU_KINDS)
    assert {(h.producer, h.output, h.consumer) for h in a.hops} == {
        ("preprocess", "PIXELS", "classifier"),
        ("preprocess", "EMBED_PIXELS", "embedder"),
    }
    assert a.largest_request == 64  # preprocess's max_images_per_request
    assert pool_holding(a, configs) <= a.usable_bytes
    assert {q.model: q.role for q in a.queues} == {
        "classifier": "consumer",
        "embedder": "consumer",
        "preprocess": "front",
    }
    # the front queue holds encoded images on the host: as configured
    assert (
        a.queue("preprocess").max_queue_size
        == configs["preprocess"].dynamic_batching.default_queue_policy.max_queue_size
    )


def test_a_larger_pool_admits_more_and_each_queue_stops_at_its_config():
    sizes = [
        admission.plan(shipped(), mb, 1, GPU_KINDS).queue("classifier").max_queue_size for mb in (1024, 2048, 65536)
    ]
    assert (
        sizes[0] < sizes[1] < sizes[2] == shipped()["classifier"].dynamic_batching.default_queue_policy.max_queue_size
    )


def test_batch_limits_follow_the_largest_request_and_the_preferred_batches():
    configs = shipped()
    a = admission.plan(configs, 1024, 1, GPU_KINDS)
    assert a.max_batch["preprocess"] == (64, 256)
    for ensemble in ("classify", "embed", "analyze"):  # an ensemble's max_batch_size <= its steps' (Triton's rule)
        assert a.max_batch[ensemble][0] == 64
    assert a.max_batch["classifier"] == (128, 256)  # its largest preferred_batch_size
    for name, c in configs.items():
        admission.apply(c, name, a)
    for c in configs.values():
        for step in c.ensemble_scheduling.step:
            assert c.max_batch_size <= configs[step.model_name].max_batch_size, (c.name, step.model_name)


def test_each_gpu_of_one_server_adds_its_pool_to_the_queues():
    one, three = (admission.plan(shipped(), 1536, n, GPU_KINDS) for n in (1, 3))
    for q in one.queues:
        assert three.queue(q.model).max_queue_size == 3 * q.max_queue_size


def tiny_repo(
    data_type: str = "TYPE_FP16",
    pre_batch: int = 64,
    net: str = "max_batch_size: 64 dynamic_batching { default_queue_policy { max_queue_size: 1000 } }",
    ens_batch: int = 16,
    pre: str = "",
    dims: str = "3, 224, 224",
) -> dict[str, model_config_pb2.ModelConfig]:
    """An ensemble ``ens`` of a GPU producer ``pre`` (``pre``: more of its config) and a consumer ``net`` (``net``:
    its batching and scheduling) handing one tensor ``dims`` of ``data_type`` per image."""
    return {
        "pre": config(
            f'name: "pre" backend: "python" max_batch_size: {pre_batch} instance_group [{{count: 1 kind: KIND_GPU}}]'
            f' output [{{name: "X" data_type: {data_type} dims: [{dims}]}}] {pre}'
        ),
        "net": config(
            f'name: "net" backend: "python" instance_group [{{count: 1 kind: KIND_GPU}}]'
            f' input [{{name: "x" data_type: {data_type} dims: [{dims}]}}] {net}'
        ),
        "ens": config(
            f'name: "ens" platform: "ensemble" max_batch_size: {ens_batch} ensemble_scheduling {{ step ['
            '{model_name: "pre" model_version: -1 input_map {key: "I" value: "I"}'
            ' output_map {key: "X" value: "t"}},'
            '{model_name: "net" model_version: -1 input_map {key: "x" value: "t"}'
            ' output_map {key: "Y" value: "Y"}}]}'
        ),
    }


def test_fp16_between_steps_halves_the_bytes_and_doubles_the_images():
    fp32, fp16 = (admission.plan(tiny_repo(t), 512, 1, GPU_KINDS) for t in ("TYPE_FP32", "TYPE_FP16"))
    assert fp32.hops[0].bytes_per_image == 3 * 224 * 224 * 4 == 2 * fp16.hops[0].bytes_per_image
    assert fp16.images_per_gpu == 2 * fp32.images_per_gpu
    assert fp16.largest_request == 16 and fp16.max_batch == {"pre": (16, 64)}
    assert fp16.queue("net").max_queue_size >= 2 * fp32.queue("net").max_queue_size


def served_configs(configs: dict, a: admission.Admission) -> dict:
    for name, c in configs.items():
        admission.apply(c, name, a)
    return configs


def test_no_step_is_left_below_its_ensembles_largest_request():
    """Triton refuses an ensemble whose max_batch_size is over a step's: a consumer keeps at least the largest
    request, above its largest preferred batch where the request is larger (max_images_per_request 256)."""
    configs = shipped()
    configs["preprocess"].parameters["max_images_per_request"].string_value = "256"
    a = admission.plan(configs, 4096, 1, GPU_KINDS)
    assert a.largest_request == 256 and "classifier" not in a.max_batch  # its 256 stays (preferred: 128)
    preferred = tiny_repo(net="max_batch_size: 64 dynamic_batching { preferred_batch_size: [8, 32] }", ens_batch=64)
    b = admission.plan(preferred, 512, 1, GPU_KINDS)
    assert b.largest_request == 64 and "net" not in b.max_batch
    for case in (served_configs(configs, a), served_configs(preferred, b)):
        for c in case.values():
            for step in c.ensemble_scheduling.step:
                assert c.max_batch_size <= case[step.model_name].max_batch_size, (c.name, step.model_name)


def test_a_batching_consumer_without_dynamic_batching_gets_it_with_its_bound():
    configs = tiny_repo(net="max_batch_size: 64")
    a = admission.plan(configs, 512, 1, GPU_KINDS)
    q = a.queue("net")
    assert q.role == "consumer" and q.asked == 0 and q.max_queue_size >= 1
    assert admission.apply(configs["net"], "net", a)
    assert configs["net"].dynamic_batching.default_queue_policy.max_queue_size == q.max_queue_size
    assert pool_holding(a, tiny_repo(net="max_batch_size: 64")) <= a.usable_bytes


def test_a_consumer_triton_cannot_bound_is_shown_unbounded_and_left_as_it_is():
    for net in ("max_batch_size: 0", "max_batch_size: 8 sequence_batching {}"):
        configs = tiny_repo(net=net, dims="1, 3, 224, 224" if "0" in net else "3, 224, 224")
        a = admission.plan(configs, 512, 1, GPU_KINDS)
        assert a.queue("net").role == "unbounded" and "net unbounded" in a.describe(), net
        before = configs["net"].SerializeToString()
        admission.apply(configs["net"], "net", a)
        assert configs["net"].SerializeToString() == before


def test_models_that_do_not_batch_plan_one_tensor_a_request():
    """max_batch_size 0 everywhere: one request is one tensor (its dims hold the images), no division by 0."""
    queue = "max_batch_size: 0 dynamic_batching { default_queue_policy { max_queue_size: 4 } }"
    configs = tiny_repo(pre_batch=0, ens_batch=0, dims="8, 3, 224, 224", net=queue)
    a = admission.plan(configs, 512, 1, GPU_KINDS)
    tensor = 8 * 3 * 224 * 224 * 2
    assert a.largest_request == 1 and a.executing_bytes == 2 * tensor  # one execution of each, one tensor each
    assert a.queue("net").max_queue_size == 4 and a.images_per_gpu == a.usable_bytes // tensor


def test_the_first_request_of_each_queue_is_reserved_before_the_shares():
    """A consumer whose config asks a queue of 1 gets it on top of the others' shares, never beyond the pool."""
    for pool_mb in range(330, 2000, 37):
        configs = shipped()
        configs["embedder"].dynamic_batching.default_queue_policy.max_queue_size = 1
        try:
            a = admission.plan(configs, pool_mb, 1, GPU_KINDS)
        except ServerError:
            continue
        assert a.queue("embedder").max_queue_size == 1
        assert pool_holding(a, configs) <= a.usable_bytes, pool_mb


def test_instances_count_per_gpu_whatever_gpus_their_group_names():
    pinned = tiny_repo(pre="instance_group [{count: 2 kind: KIND_GPU gpus: [0, 1]}]")
    pinned["pre"].instance_group.pop(0)  # the builder's group; the pinned one stays
    plain = tiny_repo(pre="instance_group [{count: 2 kind: KIND_GPU}]")
    plain["pre"].instance_group.pop(0)
    assert (
        admission.plan(pinned, 512, 2, GPU_KINDS).executing_bytes
        == admission.plan(plain, 512, 2, GPU_KINDS).executing_bytes
    )


def test_a_pool_too_small_is_refused_with_the_size_that_fits():
    with pytest.raises(ServerError, match=r"raise --cuda-memory-pool-mb to at least (\d+)") as caught:
        admission.plan(shipped(), 256, 1, GPU_KINDS)
    need = int(caught.value.args[0].rsplit(" ", 1)[-1])
    assert admission.plan(shipped(), need, 1, GPU_KINDS).queue("classifier").max_queue_size >= 1


def test_cpu_producers_hand_nothing_through_the_pool():
    configs = {m.model: m.config for m in read_models(REPO, None)}  # postprocess is KIND_CPU; the rest KIND_AUTO
    cpu_only = (model_config_pb2.ModelInstanceGroup.KIND_GPU,)  # KIND_AUTO is not a GPU here
    a = admission.plan(configs, 1024, 1, cpu_only)
    assert a.hops == () and a.queues == () and "queues as configured" in a.describe()


def test_the_served_copy_carries_the_limits_and_says_so(tmp_path):
    served, chosen, a = serve_copy(REPO, tmp_path / "served", "gpu", None, 0, 1536)
    assert chosen is None  # the budget off: the admission alone
    classifier = config((served / "classifier" / "configs" / "gpu.pbtxt").read_text())
    assert classifier.dynamic_batching.default_queue_policy.max_queue_size == a.queue("classifier").max_queue_size
    assert classifier.max_batch_size == 128
    assert "admission's limits" in (served / "classifier" / "configs" / "gpu.pbtxt").read_text()
    classify = config((served / "classify" / "config.pbtxt").read_text())
    assert classify.max_batch_size == 64
    assert "holds" in a.describe() and "classifier" in a.describe()


def test_admission_of_reads_the_same_as_plan():
    models = read_models(REPO, "gpu")
    assert admission_of(models, 1024, 1) == admission.plan({m.model: m.config for m in models}, 1024, 1, GPU_KINDS)
    assert isinstance(models[0], ModelFile)


def test_an_unbounded_consumer_gets_a_bound_and_a_share_like_the_largest_bounded_one():
    configs = shipped()
    configs["embedder"].dynamic_batching.default_queue_policy.max_queue_size = 0  # unbounded: the pool's hazard
    for name in ("classifier", "preprocess"):
        configs[name].dynamic_batching.default_queue_policy.max_queue_size = 4096  # a benchmark's opened queues
    a = admission.plan(configs, 2048, 1, GPU_KINDS)
    assert a.queue("embedder").max_queue_size == a.queue("classifier").max_queue_size > 1
    assert pool_holding(a, configs) <= a.usable_bytes


def test_a_front_timeout_bounds_the_wait_in_the_first_queue_only():
    configs = shipped()
    a = admission.plan(configs, 1536, 1, GPU_KINDS, front_timeout_ms=50)
    assert a.queue("preprocess").timeout_us == 50_000
    assert (
        a.queue("classifier").timeout_us
        == configs["classifier"].dynamic_batching.default_queue_policy.default_timeout_microseconds
    )
    admission.apply(configs["preprocess"], "preprocess", a)
    policy = configs["preprocess"].dynamic_batching.default_queue_policy
    assert policy.default_timeout_microseconds == 50_000 and policy.timeout_action == policy.REJECT
    assert "preprocess 64 (0.05 s timeout)" in a.describe()
    kept = admission.plan(shipped(), 1536, 1, GPU_KINDS)  # None: the configs' own (2 s)
    assert kept.queue("preprocess").timeout_us == 2_000_000
    unbounded = shipped()  # a front queue without a size limit still gets the timeout
    unbounded["preprocess"].dynamic_batching.default_queue_policy.max_queue_size = 0
    front = admission.plan(unbounded, 1536, 1, GPU_KINDS, front_timeout_ms=50).queue("preprocess")
    assert front.max_queue_size == 0 and front.timeout_us == 50_000


def test_a_negative_queue_timeout_is_refused_with_the_option_named():
    from tritonprep.launcher.options import ServerOptions

    with pytest.raises(ServerError, match="--queue-timeout-ms"):
        ServerOptions(queue_timeout_ms=-5)
