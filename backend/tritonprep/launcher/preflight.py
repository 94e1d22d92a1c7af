"""What must hold before any tritonserver starts: the checks whose failure the user fixes, not a restart.

:func:`check` runs before :meth:`~.host.Host.start` and raises :class:`~tritonprep.errors.StartRefused` (one
line; ``tritonprep serve`` exits 2 without starting anything) for the first of:

* the embedded Triton is not installed (the ``server`` extra);
* no model repository, or one without a model (no ``<model>/config.pbtxt``);
* a model runs a network (a ``runtime`` parameter, or ``network.*`` ones) whose ONNX file is missing, or, where its
  config takes the input FP16 channel-last (the GPU configs), the channel-last variant ``make model`` writes beside
  a network it exported (``model.fp16.nhwc.onnx``: a checkout updated without ``make model``);
* no runtime for those networks is installed: ONNX Runtime comes with the ``cpu``, ``gpu-cu13`` or ``gpu-cu12``
  extra, which ``server`` alone lacks (TensorRT's Python package counts where the host has a GPU);
* a port the host needs is in use: another ``tritonprep serve`` or Triton holds it, and is left untouched.

Without these checks each of those cases started Triton, which failed to load its models (or reached the
other server's readiness) and was restarted until the supervisor gave up, with the cause only in Triton's log.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path

from ..errors import ServerError, StartRefused
from ..network_files import channels_last, nhwc_variant
from .command import config_name
from .host import Host, check_ports
from .install import TritonInstall
from .options import PACKAGED_REPOSITORY
from .served import ModelFile, read_models

#: the extras that bring a network runtime, as the one line names them
RUNTIME_EXTRAS = "pip install 'tritonprep[server,cpu]' (on a GPU: [server,gpu-cu13], or [server,gpu-cu12] for CUDA 12)"
#: a network model's parameter naming its runtime (classifier, embedder); classify_fused's are under ``network.``
RUNTIME_PARAMETER = "runtime"
NETWORK_PREFIX = "network."


def check(host: Host, find: Callable[[str], object | None] = importlib.util.find_spec) -> None:
    """Every check of the module's description, in its order; ``find`` tells whether a module is installed."""
    try:
        TritonInstall.find()
    except ServerError as e:
        raise StartRefused(str(e)) from None
    repository = host.options.model_repository
    gpus = sum(len(slot.gpus) for slot in host.topology.slots)
    models = repository_models(repository, config_name(host.options, gpus))
    networks = [m for m in models if runs_network(m)]
    for model in networks:
        onnx = network_file(repository, model)
        needed = onnx if onnx is None or not onnx.is_file() else missing_variant(model, onnx)
        if needed is not None:
            raise StartRefused(
                f"{model.model}: its network {needed} is missing; run `make model` in a checkout, or install a "
                "tritonprep wheel built by `make wheel`, which carries it"
            )
    if networks and not runtime_installed(gpus > 0, find):
        names = ", ".join(m.model for m in networks)
        raise StartRefused(f"no network runtime for {names}: ONNX Runtime is not installed; {RUNTIME_EXTRAS}")
    check_ports(host.options.host, host.ports())  # a StartRefused naming the port in use


def repository_models(repository: Path, config: str | None) -> list[ModelFile]:
    """The models Triton would serve from ``repository``; StartRefused where there is none to serve."""
    if not repository.is_dir():
        if repository == PACKAGED_REPOSITORY:
            raise StartRefused(
                f"no model repository: this install of tritonprep carries none ({repository} is missing); pass "
                "--model-repository DIR, or install a wheel built by `make wheel` (it carries every default model)"
            )
        raise StartRefused(f"no model repository at {repository}: pass --model-repository DIR (<model>/config.pbtxt)")
    try:
        models = read_models(repository, config)
    except ServerError as e:
        raise StartRefused(str(e)) from None
    if not models:
        raise StartRefused(
            f"{repository} holds no models (no <model>/config.pbtxt): pass --model-repository DIR with the models"
        )
    return models


def _parameters(model: ModelFile) -> dict[str, str]:
    return {k: v.string_value for k, v in model.config.parameters.items()}


def runs_network(model: ModelFile) -> bool:
    """Whether ``model`` runs a network in its Python-backend instances."""
    params = _parameters(model)
    return RUNTIME_PARAMETER in params or any(k.startswith(NETWORK_PREFIX) for k in params)


def network_file(repository: Path, model: ModelFile) -> Path | None:
    """The ONNX file ``model`` loads: ``network.model`` (relative to the repository), else ``model.onnx`` in its
    newest version folder; None where that is not known here (the model reports it when it loads)."""
    params = _parameters(model)
    named = params.get(NETWORK_PREFIX + "model", "").strip()
    if named:
        return repository / named  # an absolute path stays one
    if RUNTIME_PARAMETER not in params:
        return None
    folder = repository / model.model
    versions = sorted((int(p.name) for p in folder.iterdir() if p.is_dir() and p.name.isdigit()), reverse=True)
    return folder / str(versions[0]) / "model.onnx" if versions else None


def missing_variant(model: ModelFile, onnx: Path) -> Path | None:
    """The channel-last FP16 variant of ``onnx`` where ``model`` needs it and it is missing: its config takes the input
    FP16 channel-last (a network's input dims, the classifier's or the embedder's; ``classify_fused``'s ``layout``)
    and ``onnx`` is a network ``make model`` exported (its record ``model.onnx.json`` beside it), which takes NCHW. A
    network of ``tritonprep model add`` has no record: its config describes the file as it is."""
    params = _parameters(model)
    prefix = NETWORK_PREFIX if NETWORK_PREFIX + "model" in params else ""
    if params.get(prefix + "precision", "fp16").strip().lower() != "fp16":
        return None
    if prefix:
        channel_last = params.get("layout", "NCHW").strip().upper() == "NHWC"
    else:
        channel_last = bool(model.config.input) and channels_last(tuple(model.config.input[0].dims))
    variant = nhwc_variant(onnx)
    exported = onnx.with_name(onnx.name + ".json").is_file()
    return variant if channel_last and exported and not variant.is_file() else None


def runtime_installed(gpu: bool, find: Callable[[str], object | None] = importlib.util.find_spec) -> bool:
    """Whether a network runtime is installed: ONNX Runtime (either build), or TensorRT where a GPU is."""
    return find("onnxruntime") is not None or (gpu and find("tensorrt") is not None)
