"""Writing a checked :class:`~.checks.Plan` into its repository, all of it or nothing.

A new repository is a copy of the shipped one (engines and caches left out) made in a folder beside it and
renamed into place once everything is written. In an existing one, the new models are made beside it and
moved in, then each ``preprocess`` config gets the network's image output appended: the output and its
parameters, written from Triton's ``ModelConfig`` under a comment, after the config's own text and comments
(protobuf's text format lets repeated fields and map entries follow the others), and the result checked by
parsing it back and reading it as tritonprep's preprocess model will (:class:`tritonprep.spec.PreprocessConfig`).
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Union

from ..errors import ConfigError
from ..spec import PreprocessConfig
from .checks import Plan
from .configs import (
    as_json,
    container_config,
    ensemble_config,
    network_config,
    postprocess_config,
    preprocess_additions,
    read_config,
    to_text,
)
from .errors import ModelAddError
from .models import POSTPROCESS, network_model_py
from .network import LABELS_FILE, Network

log = logging.getLogger(__name__)

#: what a new repository does not copy from the shipped one: engines, their keys and caches, bytecode
NOT_COPIED = ("__pycache__", "*.plan", "*.plan.key.json", "*.plan.lock", "timing.cache", "ort-trt-cache")
#: a file's content: text to write, or a file to copy
Content = Union[str, Path]
CONTAINER = ("tensorrt", "onnxruntime")


@dataclass(frozen=True)
class Written:
    """What :func:`add` did."""

    repository: Path
    #: the repository was made, as a copy of this one (None: it existed)
    copied_from: Path | None
    #: the files written, relative to the repository (preprocess's configs included)
    files: tuple[Path, ...]
    seconds: float


def _header(net: Network, what: str) -> str:
    return f"{what}\nWritten by `tritonprep model add {net.name}` (tritonprep.repository); docs/your-network.md."


def model_files(plan: Plan) -> dict[Path, Content]:
    """Every file of the network's models, relative to the repository: configs as text, the ONNX and labels files
    to copy."""
    net = plan.network
    model, post = Path(net.network_model), Path(net.postprocess_model)
    serves = f"the {net.kind} {net.name!r}: 1/model.onnx"
    files: dict[Path, Content] = {
        Path(net.name) / "config.pbtxt": to_text(
            ensemble_config(net),
            _header(
                net,
                "What clients call: encoded images (IMAGE, BYTES [n, 1]) in, "
                + (f"the top {net.top_k} classes (SCORES, CLASS_IDS, LABELS)" if net.classifier else "EMBEDDING")
                + f" out: preprocess's {net.pixels}, then {net.network_model}.",
            ),
        ),
        Path(net.name) / "1" / ".gitkeep": "",
        model / "config.pbtxt": to_text(
            network_config(net, gpu=False),
            _header(
                net,
                f"{serves} on the best runtime installed (TensorRT, else ONNX Runtime's CUDA EP on a GPU instance, "
                "else ONNX Runtime on the CPU).\nconfigs/gpu.pbtxt is its GPU config"
                + ("; configs/tensorrt.pbtxt and onnxruntime.pbtxt the container's." if net.classifier else "."),
            ),
        ),
        model / "configs" / "gpu.pbtxt": to_text(
            network_config(net, gpu=True),
            _header(
                net,
                f"The GPU config of {net.network_model} (the launcher picks configs/gpu.pbtxt wherever it sees a GPU): "
                "the same model and\nparameters as ../config.pbtxt, with instances per GPU and no queue delay.",
            ),
        ),
        model / "1" / "model.py": network_model_py(net.kind),
        model / "1" / "model.onnx": plan.onnx,
    }
    if plan.onnx_fp16 is not None:
        files[model / "1" / "model.fp16.onnx"] = plan.onnx_fp16
    if not net.classifier:
        return files
    if plan.labels_file is not None:
        files[model / LABELS_FILE] = plan.labels_file
        files[post / LABELS_FILE] = plan.labels_file
    for platform in CONTAINER:
        files[model / "configs" / f"{platform}.pbtxt"] = to_text(
            container_config(net, platform),
            _header(
                net,
                {
                    "tensorrt": "The container's network: Triton's tensorrt_plan backend runs 1/model.plan, built on "
                    "the serving GPU from\n1/model.onnx by scripts/build_engine.py (which reads this config's input).",
                    "onnxruntime": "The container's other choice: Triton's ONNX Runtime backend runs 1/model.onnx "
                    "with its TensorRT provider\n(FP16; the engine is built while loading and cached in /ort-cache).",
                }[platform]
                + f" Logits only: the ensemble's configs/{platform}.pbtxt adds {net.postprocess_model}.",
            ),
        )
        files[Path(net.name) / "configs" / f"{platform}.pbtxt"] = to_text(
            ensemble_config(net, container=True),
            _header(
                net,
                f"The container's {net.name} (tritonserver --model-config-name={platform}): preprocess, "
                f"{net.network_model}'s logits,\nthen {net.postprocess_model}'s top {net.top_k}.",
            ),
        )
    post_role = f"The container's top-k step after {net.network_model}'s logits (in configs/tensorrt, onnxruntime)."
    files[post / "config.pbtxt"] = to_text(
        postprocess_config(net, container=False),
        _header(net, post_role + "\nThe embedded mode loads it but does not call it: the network answers its top-k."),
    )
    for platform in CONTAINER:
        files[post / "configs" / f"{platform}.pbtxt"] = to_text(
            postprocess_config(net, container=True), _header(net, post_role + " Four CPU instances.")
        )
    files[post / "1" / "model.py"] = POSTPROCESS
    return files


def preprocess_configs(repository: Path) -> list[Path]:
    """The configs of ``preprocess`` that get the network's output: ``config.pbtxt`` and ``configs/*.pbtxt``, less
    the links to another of them (updating that one updates the link)."""
    folder = repository / "preprocess"
    paths = [folder / "config.pbtxt", *sorted((folder / "configs").glob("*.pbtxt"))]
    real = {p.resolve() for p in paths if not p.is_symlink()}
    return [p for p in paths if not (p.is_symlink() and p.resolve() in real)]


def updated_preprocess(path: Path, plan: Plan) -> str:
    """``path``'s text with the network's output appended, checked; :class:`ModelAddError` where it would not load."""
    from google.protobuf import text_format

    net = plan.network
    try:
        config = read_config(path)
    except ConfigError as e:
        raise ModelAddError([f"{e}; fix it, then add the network again"]) from None
    additions = preprocess_additions(net, plan.spec_parameters, {o.name for o in config.output})
    text = path.read_text(encoding="utf-8").rstrip("\n") + "\n\n"
    text += to_text(
        additions,
        f"{net.pixels}: the input of {net.network_model}, added by `tritonprep model add {net.name}`; its "
        "preprocessing in full,\nso that the unprefixed parameters above do not change it (docs/your-network.md).",
    )
    config.MergeFrom(additions)
    if text_format.Parse(text, type(config)()) != config:
        raise ModelAddError([f"{path}: its text and the network's output do not merge; add the output by hand"])
    try:
        PreprocessConfig.from_model_config(as_json(config))
    except ConfigError as e:
        raise ModelAddError([f"{path} with {net.pixels} would not load: {e}"]) from None
    return text


def _put(dest: Path, content: Content) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, Path):
        shutil.copyfile(content, dest)
    else:
        dest.write_text(content, encoding="utf-8")


def _replace(path: Path, text: str) -> None:
    """Write ``path`` atomically (a link becomes a file of its own)."""
    tmp = path.with_name(f".{path.name}.tritonprep-add")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


@contextmanager
def _staging(near: Path) -> Iterator[Path]:
    """A scratch folder beside ``near`` (the same file system: renames, not copies), removed at the end."""
    try:
        folder = Path(tempfile.mkdtemp(prefix=f".{near.name}.tritonprep-add-", dir=near.parent))
    except OSError:
        folder = Path(tempfile.mkdtemp(prefix="tritonprep-add-"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _relative_configs(repository: Path) -> list[Path]:
    return [p.relative_to(repository) for p in preprocess_configs(repository)]


def _move_in(stage: Path, target: Path, models: tuple[str, ...], texts: dict[Path, str]) -> None:
    """Move the staged ``models`` into ``target`` and write preprocess's new ``texts``; on a failure, undo both."""
    originals = {relative: (target / relative).read_text(encoding="utf-8") for relative in texts}
    moved: list[Path] = []
    written: list[Path] = []
    try:
        for model in models:
            shutil.move(str(stage / model), str(target / model))
            moved.append(target / model)
        for relative, text in texts.items():
            _replace(target / relative, text)
            written.append(relative)
    except OSError:
        for folder in moved:
            shutil.rmtree(folder, ignore_errors=True)
        for relative in written:
            _replace(target / relative, originals[relative])
        raise


def add(plan: Plan) -> Written:
    """Write the network's models and its preprocess output into ``plan.repository`` (see the module's description)."""
    t0 = time.monotonic()
    target = plan.repository
    files = model_files(plan)
    target.parent.mkdir(parents=True, exist_ok=True)
    with _staging(target) as stage:
        if plan.start_from is not None:
            work = stage / "repository"
            shutil.copytree(plan.start_from, work, symlinks=True, ignore=shutil.ignore_patterns(*NOT_COPIED))
            configs = _relative_configs(work)
            for relative in configs:
                _replace(work / relative, updated_preprocess(work / relative, plan))
            for relative, content in files.items():
                _put(work / relative, content)
            if target.exists():
                target.rmdir()  # an empty folder (checks.is_new)
            shutil.move(str(work), str(target))
        else:
            configs = _relative_configs(target)
            texts = {relative: updated_preprocess(target / relative, plan) for relative in configs}
            for relative, content in files.items():
                _put(stage / relative, content)
            _move_in(stage, target, plan.network.models, texts)
    seconds = time.monotonic() - t0
    log.info("added %s to %s in %.1f s", plan.network.name, target, seconds)
    return Written(target, plan.start_from, tuple([*files, *configs]), seconds)
