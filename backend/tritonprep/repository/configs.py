"""Triton's ``ModelConfig`` messages of an added network, built from its :class:`~.network.Network`.

Each function returns one config as the typed protobuf message (``tritonclient.grpc.model_config_pb2``),
with the shipped models' choices (``classifier``, ``embedder``, ``postprocess``, ``classify``, ``embed``):
``max_batch_size`` 256, bounded queues that reject, one ``KIND_AUTO`` instance on the CPU config and
instances per GPU on ``configs/gpu.pbtxt``. :func:`to_text` writes one as ``config.pbtxt`` text. The unit
tests hold them against the shipped classifier's hand-kept configs.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..classifier.embedding import OUTPUT as EMBEDDING_OUTPUT
from ..classifier.labels import PARAMETER as LABELS_PARAMETER
from ..classifier.postprocess import OUTPUTS as TOP_K_OUTPUTS
from ..errors import ConfigError
from .network import Network

#: the shipped models' batch limit: images travel along the batch axis
MAX_BATCH = 256
#: the names the Python-backend network models read (tritonprep.pipeline.networks)
NETWORK_INPUT, LOGITS = "input", "logits"
#: the container's top-k step's input (tritonprep's postprocess model.py)
POSTPROCESS_INPUT = "LOGITS"
IMAGE = "IMAGE"
#: the ensembles' outputs: a classifier's top-k, an embedder's vector
EMBEDDING = "EMBEDDING"
#: what the shipped networks run with (model_repository/classifier/config.pbtxt): the runtime options
RUNTIME_OPTIONS = {
    "runtime": "auto",
    "layout": "nhwc",
    "cuda_graphs": "true",
    "batch_buckets": "8,64",
    "cudnn_conv_algo_search": "heuristic",
    "cudnn_conv_use_max_workspace": "false",
    "arena_extend_strategy": "same_as_requested",
    "fuse_conv_bias": "false",
}
#: the classifier's instances on one GPU take turns at the network (tritonprep.triton.turns)
TURNS = ("network_turns", "ordered")
#: the ONNX Runtime backend's TensorRT provider in the container (model_repository/classifier/configs/onnxruntime.pbtxt)
ORT_TENSORRT = {
    "precision_mode": "FP16",
    "max_workspace_size_bytes": "4294967296",
    "trt_engine_cache_enable": "true",
    "trt_engine_cache_path": "/ort-cache",
    "trt_timing_cache_enable": "true",
    "trt_timing_cache_path": "/ort-cache",
}
#: the batch sizes of the container engines' optimization profile: smallest, tuned for, largest
PROFILE = (1, 64, MAX_BATCH)


def pb() -> Any:
    """Triton's model-config protobuf module, or the extra that brings it."""
    try:
        from tritonclient.grpc import model_config_pb2
    except ImportError as e:
        raise ConfigError(f"writing model configs needs tritonclient: pip install 'tritonprep[server]' ({e})") from None
    return model_config_pb2


def read_config(path: Path) -> Any:
    """The ``ModelConfig`` of a ``config.pbtxt``; :class:`ConfigError` naming the file where it cannot be read."""
    from google.protobuf import text_format

    try:
        return text_format.Parse(path.read_text(encoding="utf-8"), pb().ModelConfig())
    except (OSError, UnicodeDecodeError, text_format.ParseError) as e:
        raise ConfigError(f"cannot read {path}: {e}") from None


def as_json(config: Any) -> dict[str, Any]:
    """A ``ModelConfig`` as the JSON that Triton hands a Python-backend model (``args["model_config"]``)."""
    from google.protobuf import json_format

    return json_format.MessageToDict(config, preserving_proto_field_name=True)


def _config(name: str, *, backend: str = "", platform: str = "") -> Any:
    return pb().ModelConfig(name=name, backend=backend, platform=platform, max_batch_size=MAX_BATCH)


def _tensor(repeated: Any, name: str, data_type: str, dims: tuple[int, ...] | list[int]) -> None:
    repeated.add(name=name, data_type=pb().DataType.Value(data_type), dims=list(dims))


def _instances(config: Any, count: int, kind: str) -> None:
    config.instance_group.add(count=count, kind=pb().ModelInstanceGroup.Kind.Value(kind))


def _queue(config: Any, delay_us: int, size: int = 64, timeout_us: int = 2_000_000, preferred: tuple = ()) -> None:
    """Dynamic batching with the shipped bounded queue: at most ``size`` waiting, rejected after ``timeout_us``."""
    batching = config.dynamic_batching
    batching.preferred_batch_size.extend(preferred)
    batching.max_queue_delay_microseconds = delay_us
    policy = batching.default_queue_policy
    policy.max_queue_size = size
    policy.default_timeout_microseconds = timeout_us
    policy.timeout_action = pb().ModelQueuePolicy.REJECT
    policy.allow_timeout_override = True


def _parameters(config: Any, values: Mapping[str, str]) -> None:
    for key, value in values.items():
        config.parameters[key].string_value = value


def _top_k_outputs(config: Any, k: int) -> None:
    for name, data_type in zip(TOP_K_OUTPUTS, ("TYPE_FP32", "TYPE_INT32", "TYPE_STRING")):
        _tensor(config.output, name, data_type, [k])


def network_config(net: Network, gpu: bool, half_input: bool = False) -> Any:
    """The network's Python-backend model (``config.pbtxt``, or ``configs/gpu.pbtxt`` with ``gpu``); its input FP16
    with ``half_input`` (the shipped GPU configs, whose preprocess output is FP16), else FP32."""
    config = _config(net.network_model, backend="python")
    _tensor(config.input, NETWORK_INPUT, "TYPE_FP16" if half_input else "TYPE_FP32", net.spec.output_shape)
    if net.classifier:
        _tensor(config.output, LOGITS, "TYPE_FP32", [net.width])
        _top_k_outputs(config, net.top_k)
    else:
        _tensor(config.output, EMBEDDING_OUTPUT, "TYPE_FP32", [net.width])
    if gpu:  # the shipped classifier's: two processes per GPU; full buckets under load, a lone request at once
        _instances(config, 2 if net.classifier else 1, "KIND_GPU")
        _queue(config, 0, preferred=(64, 128) if net.classifier else ())
    else:
        _instances(config, 1, "KIND_AUTO")
        _queue(config, 1000)
    params = {**RUNTIME_OPTIONS, "precision": "fp16" if net.fp16 else "fp32"}
    if net.classifier:
        params[TURNS[0]] = TURNS[1]
        if net.labels:
            params[LABELS_PARAMETER] = net.labels
    params["FORCE_CPU_ONLY_INPUT_TENSORS"] = "no"  # GPU inputs stay on the GPU
    _parameters(config, params)
    return config


def _profile_shape(net: Network, batch: int) -> str:
    return f"{net.onnx_input}:{'x'.join(map(str, (batch, *net.spec.output_shape)))}"


def container_config(net: Network, platform: str) -> Any:
    """The container's network (a classifier's), answering logits under the ONNX graph's own tensor names:
    ``tensorrt`` (Triton's ``tensorrt_plan`` backend: ``1/model.plan``, built from ``1/model.onnx`` on the
    serving GPU by ``scripts/build_engine.py``) or ``onnxruntime`` (Triton's ONNX Runtime backend with its
    TensorRT provider, FP16, the engine cached in ``/ort-cache``)."""
    if platform not in ("tensorrt", "onnxruntime"):
        raise ValueError(f"platform must be tensorrt or onnxruntime, got {platform!r}")
    config = _config(net.network_model, platform="tensorrt_plan" if platform == "tensorrt" else "onnxruntime_onnx")
    _tensor(config.input, net.onnx_input, "TYPE_FP32", net.spec.output_shape)
    _tensor(config.output, net.onnx_output, "TYPE_FP32", [net.width])
    _instances(config, 1, "KIND_GPU")
    config.dynamic_batching.max_queue_delay_microseconds = 1000
    if platform == "onnxruntime":
        accelerator = config.optimization.execution_accelerators.gpu_execution_accelerator.add(name="tensorrt")
        shapes = dict(zip(("min", "opt", "max"), (_profile_shape(net, b) for b in PROFILE)))
        values = {**ORT_TENSORRT, **{f"trt_profile_{k}_shapes": v for k, v in shapes.items()}}
        for key, value in values.items():
            accelerator.parameters[key] = value
    return config


def postprocess_config(net: Network, container: bool) -> Any:
    """The container's top-k step of a classifier (tritonprep's ``postprocess`` model.py): logits in, the top-k and
    their labels out. The embedded mode loads it too (one CPU instance) but its ensemble does not call it."""
    config = _config(net.postprocess_model, backend="python")
    _tensor(config.input, POSTPROCESS_INPUT, "TYPE_FP32", [net.width])
    _top_k_outputs(config, net.top_k)
    _instances(config, 4 if container else 1, "KIND_CPU")  # four: so that the hop is not the ensemble's wall
    _queue(config, 0, size=256, timeout_us=5_000_000)
    if net.labels:
        _parameters(config, {LABELS_PARAMETER: net.labels})
    return config


def ensemble_config(net: Network, container: bool = False) -> Any:
    """The ensemble clients call: ``preprocess`` (the network's image output), then the network; in the
    container (a classifier) the TensorRT plan's logits, then its top-k step. An embedder's maps the provenance
    outputs, as ``embed`` does; a classifier's none, as ``classify`` (each would be built for every request)."""
    config = _config(net.name, platform="ensemble")
    _tensor(config.input, IMAGE, "TYPE_STRING", [1])
    steps = config.ensemble_scheduling.step
    prep = steps.add(model_name="preprocess", model_version=-1)
    prep.input_map[IMAGE] = IMAGE
    prep.output_map[net.pixels] = net.tensor("pixels")
    network = steps.add(model_name=net.network_model, model_version=-1)
    if not net.classifier:
        _tensor(config.output, EMBEDDING, "TYPE_FP32", [net.width])
        for name, data_type, dims in provenance(net):
            _tensor(config.output, name, data_type, dims)
            prep.output_map[name] = name
        network.input_map[NETWORK_INPUT] = net.tensor("pixels")
        network.output_map[EMBEDDING_OUTPUT] = EMBEDDING
        return config
    _top_k_outputs(config, net.top_k)
    if not container:
        network.input_map[NETWORK_INPUT] = net.tensor("pixels")
        for name in TOP_K_OUTPUTS:
            network.output_map[name] = name
        return config
    network.input_map[net.onnx_input] = net.tensor("pixels")
    network.output_map[net.onnx_output] = net.tensor("logits")
    top = steps.add(model_name=net.postprocess_model, model_version=-1)
    top.input_map[POSTPROCESS_INPUT] = net.tensor("logits")
    for name in TOP_K_OUTPUTS:
        top.output_map[name] = name
    return config


def provenance(net: Network) -> list[tuple[str, str, list[int]]]:
    """``(name, data_type, dims)`` of the provenance outputs an embedder's ensemble maps (``embed``'s for its input)."""
    return [
        ("ORIGINAL_SIZE", "TYPE_INT32", [2]),
        ("DECODER", "TYPE_STRING", [1]),
        (f"{net.pixels}_SCALE", "TYPE_FP32", [2]),
        (f"{net.pixels}_PADDING", "TYPE_INT32", [4]),
    ]


def preprocess_additions(net: Network, spec_parameters: Mapping[str, str], declared: set[str]) -> Any:
    """What the network adds to ``preprocess``'s config: its image output (with its ``_SCALE`` and ``_PADDING``
    provenance) and the ``<OUTPUT>.``-prefixed parameters of its preprocessing (``spec_parameters``), plus the
    shared provenance outputs where the config lacks them (``declared``: its outputs). A fragment: it holds no
    name, and protobuf's text format lets its repeated fields follow the config's own."""
    config = pb().ModelConfig()
    _tensor(config.output, net.pixels, net.spec.triton_dtype, net.spec.output_shape)
    for name, data_type, dims in provenance(net):
        if name not in declared:
            _tensor(config.output, name, data_type, dims)
    _parameters(config, {f"{net.pixels}.{key}": value for key, value in spec_parameters.items()})
    return config


#: fields protobuf's text format leaves out at their default, written all the same: the config says what Triton does
EXPLICIT = {
    "inference.ModelInstanceGroup": ("kind",),
    "inference.ModelQueuePolicy": ("timeout_action",),
    "inference.ModelDynamicBatching": ("max_queue_delay_microseconds",),
}


def _explicit_defaults(message: Any, indent: int, as_one_line: bool) -> str | None:
    """A message of :data:`EXPLICIT` with its fields at their default written too (``kind: KIND_AUTO``,
    ``timeout_action: REJECT``, ``max_queue_delay_microseconds: 0``); None for the others (printed as usual)."""
    from google.protobuf import text_format

    fields = EXPLICIT.get(message.DESCRIPTOR.full_name)
    if fields is None or as_one_line:
        return None

    def inner(m: Any, i: int, o: bool) -> str | None:  # the fields below, written this way too; not itself again
        return None if m is message else _explicit_defaults(m, i, o)

    text = text_format.MessageToString(
        message, use_short_repeated_primitives=True, use_index_order=True, message_formatter=inner
    )
    lines = text.splitlines()
    for name in fields:
        field = message.DESCRIPTOR.fields_by_name[name]
        value = getattr(message, name)
        shown = field.enum_type.values_by_number[value].name if field.enum_type is not None else str(value)
        if not any(line.startswith(f"{name}:") for line in lines):
            lines.insert(0, f"{name}: {shown}")
    return ("\n" + " " * indent).join(lines)


#: fields written one element a line (``output { name: "SCORES" data_type: TYPE_FP32 dims: [5] }``)
ONE_LINE = ("input", "output", "parameters")


def _one_line(config: Any, field: str, element: Any, key: str | None = None) -> str:
    """One element of a repeated or map field of ``config``, alone on a line."""
    from google.protobuf import text_format

    single = type(config)()
    if key is not None:
        getattr(single, field)[key].CopyFrom(element)
    else:
        getattr(single, field).add().CopyFrom(element)
    return text_format.MessageToString(single, as_one_line=True, use_short_repeated_primitives=True)


def _fields(config: Any, keep: Any) -> Any:
    """A copy of ``config`` with only the fields whose descriptor ``keep`` accepts."""
    part = type(config)()
    part.CopyFrom(config)
    for field, _ in config.ListFields():
        if not keep(field):
            part.ClearField(field.name)
    return part


def to_text(config: Any, header: str = "") -> str:
    """``config`` as ``config.pbtxt`` text after ``header`` (each of its lines written as a comment): fields in the
    order Triton's model_config.proto declares them, each input, output and parameter on a line of its own (as the
    shipped configs write them; ``parameters`` last). Parsing it gives ``config`` back."""
    from google.protobuf import text_format

    def text(part: Any) -> str:
        return text_format.MessageToString(
            part, use_short_repeated_primitives=True, use_index_order=True, message_formatter=_explicit_defaults
        )

    index = {f.name: f.index for f in config.DESCRIPTOR.fields}
    head = _fields(config, lambda f: f.index < index["input"])
    tail = _fields(config, lambda f: f.index > index["output"] and f.name not in ONE_LINE)
    lines = [f"# {line}".rstrip() for line in header.splitlines()]
    lines.append(text(head).rstrip("\n"))
    lines += [_one_line(config, name, e) for name in ("input", "output") for e in getattr(config, name)]
    lines.append(text(tail).rstrip("\n"))
    lines += [_one_line(config, "parameters", config.parameters[k], k) for k in sorted(config.parameters)]
    return "\n".join(line for line in lines if line) + "\n"
