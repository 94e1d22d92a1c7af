"""``tritonprep model add``'s checks: the arguments in, a checked :class:`Plan` out, or every problem at once.

Each problem is one line saying what is wrong and what to do; :func:`plan` raises them together as
:class:`~.errors.ModelAddError` before anything is written. What is checked: the name (its form, and no model
or preprocess output of the repository has it yet), each ``--set`` (a per-output preprocess parameter of
docs/configuration.md, with a value the spec accepts), the ONNX input against the preprocess output (one
input; 4 axes with a dynamic batch; its layout, its height and width, FP32), the ONNX output (``[batch,
classes]`` or ``[batch, D]``, FP32, a fixed width), the labels against the classes and the top-k within them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..classifier.labels import IMAGENET, read_labels
from ..errors import ConfigError
from ..network_files import fp16_variant
from ..spec import PARAMETERS, PER_OUTPUT, OutputSpec, output_parameters
from .configs import read_config
from .errors import ModelAddError
from .network import DEFAULT_TOP_K, LABELS_FILE, NAME_PATTERN, Network
from .onnx_io import FLOAT, Signature, Tensor, read_signature
from .paths import is_new, is_repository, shipped_repository

#: the per-output preprocess parameters that ``--set`` takes (``preset`` first, then the others)
SETTABLE = tuple(p.name for p in PARAMETERS if p.name in PER_OUTPUT)


@dataclass(frozen=True)
class Request:
    """What ``tritonprep model add`` was asked for, as given."""

    name: str
    onnx: Path
    repository: Path
    kind: str = "classifier"
    labels: str | None = None
    top_k: int | None = None
    sets: tuple[str, ...] = ()


@dataclass(frozen=True)
class Plan:
    """A checked network and where its files come from: everything :func:`tritonprep.repository.write.add` needs."""

    network: Network
    repository: Path
    onnx: Path
    #: the FP16 variant beside the ONNX file, copied as ``model.fp16.onnx`` (None: there is none)
    onnx_fp16: Path | None = None
    #: the labels file to copy beside the network (None: ``imagenet`` or the class index)
    labels_file: Path | None = None
    #: the repository a new ``repository`` starts as a copy of (None: it exists)
    start_from: Path | None = None
    #: the ``<OUTPUT>.``-prefixed preprocess parameters of the network's image output, without the prefix
    spec_parameters: dict[str, str] = field(default_factory=dict)


def parse_sets(items: Sequence[str]) -> tuple[dict[str, str], list[str]]:
    """``--set KEY=VALUE`` items as ``{KEY: VALUE}``, and the problems of those that are not settable."""
    values: dict[str, str] = {}
    problems = []
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            problems.append(f"--set {item!r}: write KEY=VALUE, e.g. --set output_size=240,240")
        elif key in values:
            problems.append(f"--set {key} is given twice; give each parameter once")
        elif key not in {p.name for p in PARAMETERS}:
            problems.append(
                f"--set {key}: no such preprocess parameter; a network's own are {', '.join(SETTABLE)} "
                "(docs/configuration.md)"
            )
        elif key not in PER_OUTPUT:
            problems.append(
                f"--set {key}: is set once for the whole preprocess model (each image is decoded once for every "
                "network), not per network; change it in preprocess/config.pbtxt instead"
            )
        else:
            values[key] = value.strip()
    return values, problems


def output_spec(values: dict[str, str]) -> tuple[OutputSpec | None, list[str]]:
    """The network's preprocessing: the defaults of docs/configuration.md with ``values`` over them."""
    try:
        return OutputSpec.from_parameters(values), []
    except ConfigError as e:
        return None, [f"--set: {e}"]


def layout_of(tensor: Tensor) -> str | None:
    """``NCHW`` or ``NHWC`` from where a 4-axis input has its 3 channels (NCHW where both could be), else None."""
    if tensor.fixed(1) == 3:
        return "NCHW"
    if tensor.fixed(3) == 3:
        return "NHWC"
    return None


def check_input(inputs: Sequence[Tensor], spec: OutputSpec | None) -> list[str]:
    """The ONNX input against the preprocess output that will feed it (``spec``; None: not known)."""
    if len(inputs) != 1:
        names = ", ".join(repr(t.name) for t in inputs)
        return [f"the network has {len(inputs)} inputs ({names}); tritonprep feeds one image tensor: export one input"]
    x = inputs[0]
    where = f"the ONNX input {x.name!r} is {x.shape_text}"
    if len(x.shape) != 4:
        return [f"{where}; an image network takes 4 axes: [batch, 3, height, width] or [batch, height, width, 3]"]
    problems = []
    if x.fixed(0) is not None:
        problems.append(
            f"{where}: its batch axis is fixed at {x.fixed(0)}; export it with a dynamic batch axis, e.g. "
            f"torch.onnx.export(..., dynamic_axes={{{x.name!r}: {{0: 'batch'}}}})"
        )
    if x.type != FLOAT:
        problems.append(
            f"{where} of {x.element}; the network runtimes feed FP32 (float32): export FP32 input (an FP16 network "
            "keeps FP32 input and output, e.g. onnxruntime's float16 converter with keep_io_types=True)"
        )
    layout = layout_of(x)
    if layout is None:
        problems.append(f"{where}: it has no axis of 3 channels (axis 1 or 3); tritonprep makes RGB or BGR images")
    if spec is None:
        return problems
    if spec.dtype != "FP32":
        problems.append(f"{where} of float32 but the preprocess output is {spec.dtype}: drop --set dtype={spec.dtype}")
    if layout is not None and layout != spec.layout:
        problems.append(
            f"{where}, {layout}, but the preprocess output is {spec.layout} {list(spec.output_shape)}: "
            f"add --set layout={layout}"
        )
    if layout is not None:
        height, width = (x.fixed(2), x.fixed(3)) if layout == "NCHW" else (x.fixed(1), x.fixed(2))
        want = (height or spec.output_height, width or spec.output_width)
        if want != (spec.output_height, spec.output_width):
            hint = f"add --set output_size={want[0]},{want[1]}"
            if spec.resize == "shorter_side_crop" and spec.resize_shorter < max(want):
                hint += f" and --set resize_shorter=N with N >= {max(want)} (e.g. {max(want) + 32}: TF's crop padding)"
            problems.append(
                f"{where}: it takes {want[0]}x{want[1]} images but the preprocess output is "
                f"{spec.output_height}x{spec.output_width}: {hint}"
            )
    return problems


def check_output(outputs: Sequence[Tensor], kind: str) -> tuple[int | None, list[str]]:
    """The width of the network's (first) output, its classes or its embedding's length, and its problems."""
    what = "classes" if kind == "classifier" else "D"
    if not outputs:
        return None, ["the network has no output"]
    y = outputs[0]
    where = f"the ONNX output {y.name!r} is {y.shape_text}"
    if len(y.shape) != 2:
        return None, [f"{where}; a {kind} answers 2 axes, [batch, {what}]: export it so (e.g. flatten before it)"]
    problems = []
    if y.type != FLOAT:
        problems.append(f"{where} of {y.element}; the network runtimes read FP32 (float32) output: export FP32 output")
    width = y.fixed(1)
    if width is None:
        problems.append(f"{where}: its {what} axis has no fixed size; export it with a fixed one")
    return width, problems


def check_fp16(path: Path, signature: Signature) -> list[str]:
    """An FP16 variant beside the ONNX file must take and give what the FP32 one does."""
    try:
        variant = read_signature(path)
    except ModelAddError as e:
        return [f"FP16 variant {path}: {p}" for p in e.problems]
    if variant != signature:
        return [
            f"{path} (the FP16 variant, copied as model.fp16.onnx) has inputs and outputs other than the FP32 "
            "file's; export it with FP32 input and output (keep_io_types=True), or remove it"
        ]
    return []


def check_classifier(request: Request, classes: int | None) -> tuple[int, str, Path | None, list[str]]:
    """``(top-k, labels parameter, labels file to copy, problems)`` of a classifier with ``classes`` outputs."""
    problems = []
    top_k = request.top_k if request.top_k is not None else min(DEFAULT_TOP_K, classes or DEFAULT_TOP_K)
    if top_k < 1 or (classes is not None and top_k > classes):
        most = f"1..{classes}" if classes is not None else "at least 1"
        problems.append(f"--top-k {top_k}: the network has {classes} classes; give {most}")
    text = (request.labels or "").strip()
    parameter, labels_file = "", None
    if text:
        labels_file = None if text.lower() == IMAGENET else Path(text)
        parameter = IMAGENET if labels_file is None else LABELS_FILE
        try:
            labels = read_labels(IMAGENET if labels_file is None else str(labels_file.resolve()), Path.cwd())
            if classes is not None:
                labels.check(classes)
        except ConfigError as e:
            problems.append(f"--labels {text}: {e}")
    return top_k, parameter, labels_file, problems


def check_name(name: str, repository: Path, start_from: Path | None) -> list[str]:
    """The name's form, and that neither its models nor its preprocess output exist in the repository."""
    if not NAME_PATTERN.fullmatch(name):
        return [
            f"NAME {name!r}: use lowercase letters, digits, '_' and '-', starting with a letter, at most 48 "
            "characters (it names the ensemble clients call)"
        ]
    folder = start_from or repository
    probe = Network(name, "classifier", OutputSpec(), "x", "y", 1)
    taken = [m for m in probe.models if (folder / m).exists()]
    problems = [
        f"{m!r} is already a model of {repository}; pick another NAME or remove {repository / m}" for m in taken
    ]
    configs = [folder / "preprocess" / "config.pbtxt", *sorted((folder / "preprocess" / "configs").glob("*.pbtxt"))]
    outputs = {o.name for cfg in configs if cfg.is_file() for o in read_config(cfg).output}  # every config it writes
    if probe.pixels in outputs:
        problems.append(
            f"preprocess already has an output {probe.pixels!r} in {repository}; pick another NAME, or remove that "
            "output and its parameters from preprocess's configs"
        )
    return problems


def check_repository(repository: Path) -> tuple[Path | None, list[str]]:
    """``(the repository a new one starts from, or None for an existing one, problems)``."""
    if is_new(repository):
        if repository.exists() and not repository.is_dir():
            return None, [f"--repository {repository}: not a folder"]
        try:
            return shipped_repository(), []
        except ModelAddError as e:
            return None, list(e.problems)
    if not is_repository(repository):
        return None, [
            f"--repository {repository}: not a tritonprep model repository (it has no preprocess/config.pbtxt); "
            "give a repository made by tritonprep, or a new folder (it starts as a copy of the shipped one)"
        ]
    return None, []


def plan(request: Request) -> Plan:
    """The checked plan of ``request``; :class:`ModelAddError` with every problem found, nothing written."""
    problems: list[str] = []
    classifier = request.kind == "classifier"
    if not classifier and (request.labels is not None or request.top_k is not None):
        problems.append("--labels and --top-k are a classifier's; an embedder answers one vector per image")
    start_from, found = check_repository(request.repository)
    problems += found
    if not found:
        problems += check_name(request.name, request.repository, start_from)
    values, found = parse_sets(request.sets)
    problems += found
    spec, found = output_spec(values) if not found else (None, [])
    problems += found
    try:
        signature = read_signature(request.onnx)
    except ModelAddError as e:
        raise ModelAddError([*problems, *e.problems]) from None
    problems += check_input(signature.inputs, spec)
    width, found = check_output(signature.outputs, request.kind)
    problems += found
    fp16 = fp16_variant(request.onnx)
    has_fp16 = request.onnx.name.endswith(".onnx") and fp16.is_file() and fp16 != request.onnx
    if has_fp16:
        problems += check_fp16(fp16, signature)
    top_k, labels, labels_file = 0, "", None
    if classifier:
        top_k, labels, labels_file, found = check_classifier(request, width)
        problems += found
    if problems or spec is None or width is None:  # without a problem both were read
        raise ModelAddError(problems)
    network = Network(
        request.name,
        request.kind,
        spec,
        signature.inputs[0].name,
        signature.outputs[0].name,
        width,
        top_k=top_k,
        labels=labels,
        fp16=has_fp16,
    )
    return Plan(
        network,
        request.repository,
        request.onnx,
        onnx_fp16=fp16 if has_fp16 else None,
        labels_file=labels_file,
        start_from=start_from,
        spec_parameters=output_parameters(spec),
    )
