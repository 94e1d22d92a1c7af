"""A preprocess model's whole configuration: its image outputs, its provenance outputs, and the model-wide options."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError
from ..memory import instance_budget_mb
from ..parameters import check_choice, check_mps_client
from .options import EXECUTORS, DecoderOptions, Limits
from .outputs import OutputSpec
from .provenance import PROVENANCE, provenance_of
from .table import PER_OUTPUT, TABLE, check_retired, read_parts, with_preset


@dataclass(frozen=True)
class PreprocessConfig:
    """Everything one preprocess model does: each image is decoded once (``decoding``, within ``limits``, on
    the ``executor``) and turned into each of its image ``outputs`` (an :class:`OutputSpec` each); the
    provenance outputs it offers are computed only when requested."""

    #: (output name, spec) of each image output, in config order
    outputs: tuple[tuple[str, OutputSpec], ...]
    #: names of the provenance outputs the model declares (see :data:`~.provenance.PROVENANCE`)
    provenance: tuple[str, ...] = ()
    #: auto (the GPU executor on a GPU instance), gpu or cpu
    executor: str = "auto"
    #: worker threads of the CPU executor and of the GPU executor's Pillow fallback (0: one per core, at most 8)
    cpu_threads: int = 0
    decoding: DecoderOptions = field(default_factory=DecoderOptions)
    limits: Limits = field(default_factory=Limits)
    #: the most GPU memory one GPU instance may hold (the parameter's text, tritonprep.memory; "": no cap)
    gpu_memory_mb: str = ""
    #: under MPS, the share of the GPU's SMs a GPU instance's process may use, percent (0: no limit of its own)
    mps_active_thread_percentage: int = 0
    #: under MPS, the scheduling priority of a GPU instance's process: 0 normal, 1 below normal
    mps_client_priority: int = 0

    def __post_init__(self) -> None:
        check_choice("executor", self.executor, EXECUTORS)
        if self.gpu_memory_mb:
            instance_budget_mb(self.gpu_memory_mb)  # a malformed budget fails the load, not the first GPU use
        if self.cpu_threads < 0:
            raise ConfigError(f"cpu_threads must be >= 0, got {self.cpu_threads}")
        check_mps_client(self.mps_active_thread_percentage, self.mps_client_priority)
        if not self.outputs:
            raise ConfigError("the preprocess model declares no image output; add one (e.g. PIXELS) to config.pbtxt")
        names = [n for n, _ in self.outputs]
        if len(set(names)) != len(names):
            raise ConfigError(f"image output names must be unique, got {names}")
        for p in self.provenance:
            kind, image = provenance_of(p)
            if not kind or (image is not None and image not in names):
                raise ConfigError(
                    f"{p!r} is not a provenance output of this model: use ORIGINAL_SIZE, DECODER or "
                    f"<image output>_SCALE / _PADDING with an image output of {names}"
                )

    @property
    def specs(self) -> dict[str, OutputSpec]:
        """``{image output name: spec}``."""
        return dict(self.outputs)

    def spec(self, output_name: str) -> OutputSpec:
        """The spec of image output ``output_name``; :class:`ConfigError` if the model has none of that name."""
        specs = self.specs
        if output_name not in specs:
            raise ConfigError(f"model config has no output named {output_name!r} (image outputs: {sorted(specs)})")
        return specs[output_name]

    @property
    def resolved_cpu_threads(self) -> int:
        """Worker threads of the CPU executor (and of the GPU executor's Pillow: fallback, ``cpu_decoder_share``)."""
        return self.cpu_threads or max(1, min(8, os.cpu_count() or 1))

    @classmethod
    def single(cls, spec: OutputSpec | None = None, name: str = "PIXELS", **options: Any) -> PreprocessConfig:
        """A model with one image output (``PIXELS``) and no provenance outputs; ``options`` are the model-wide
        fields (``executor``, ``cpu_threads``, ``decoding``, ``limits``)."""
        return cls(((name, spec or OutputSpec()),), **options)

    @classmethod
    def from_parameters(
        cls, params: Mapping[str, str], image_outputs: Sequence[str] = ("PIXELS",), provenance: Sequence[str] = ()
    ) -> PreprocessConfig:
        """Build the config from unprefixed and ``<OUTPUT>.``-prefixed parameters.

        The model-wide options come from the unprefixed parameters. For output ``X`` the layers are, later
        ones winning: the table defaults, the unprefixed ``preset``, the unprefixed parameters, ``X.preset``,
        the ``X.`` parameters.
        """
        common, own = _split(params, image_outputs)
        base = with_preset(common)
        model = read_parts({k: v for k, v in base.items() if k not in PER_OUTPUT})
        outputs = []
        for name in image_outputs:
            try:
                values = {k: v for k, v in {**base, **with_preset(own[name])}.items() if k in PER_OUTPUT}
                outputs.append((name, OutputSpec(**read_parts(values)["output"])))
            except ConfigError as e:
                raise ConfigError(f"output {name!r}: {e}") from None
        return cls(
            tuple(outputs),
            tuple(provenance),
            **model["model"],
            decoding=DecoderOptions(**model["decoding"]),
            limits=Limits(**model["limits"]),
        )

    @classmethod
    def from_model_config(cls, model_config: Mapping[str, Any]) -> PreprocessConfig:
        """Build the config from Triton's JSON model config; every output must agree with its parameters."""
        raw = model_config.get("parameters", {}) or {}
        params = {k: (v.get("string_value", "") if isinstance(v, Mapping) else str(v)) for k, v in raw.items()}
        declared = [o["name"] for o in model_config.get("output", [])]
        image_outputs, provenance = [], []
        for n in declared:
            kind, image = provenance_of(n)
            if not kind:
                image_outputs.append(n)
            elif image is None or image in declared:
                provenance.append(n)
            else:
                raise ConfigError(
                    f"output {n!r} ends in {kind}, which names the provenance of image output {image!r}, "
                    f"but the config declares no output {image!r}; rename it or declare {image!r}"
                )
        config = cls.from_parameters(params, image_outputs, provenance)
        for name, spec in config.outputs:
            spec.check_output_config(model_config, name)
        outputs = {o["name"]: o for o in model_config.get("output", [])}
        for name in provenance:
            want = PROVENANCE[provenance_of(name)[0]]
            got = outputs[name]
            dims = tuple(int(d) for d in got.get("dims", []))
            if (got.get("data_type"), dims) != (want.data_type, want.dims):
                raise ConfigError(
                    f"provenance output {name!r} must be {want.data_type} with dims {list(want.dims)} "
                    f"({want.help}); the config has {got.get('data_type')} {list(dims)}"
                )
        if int(model_config.get("max_batch_size", 0)) < 1:
            raise ConfigError("the preprocess model needs max_batch_size >= 1 (images travel along the batch dim)")
        return config


def _split(params: Mapping[str, str], image_outputs: Sequence[str]) -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    """``(unprefixed parameters, {output: its X.-prefixed parameters without the prefix})``, every name checked."""
    common: dict[str, str] = {}
    own: dict[str, dict[str, str]] = {name: {} for name in image_outputs}
    for key, text in params.items():
        if check_retired(key, text):
            continue
        output, _, name = key.rpartition(".")
        if name not in TABLE:
            raise ConfigError(f"unknown preprocess parameter {key!r}; known: {sorted(TABLE)}")
        if not output:
            common[name] = text
        elif name not in PER_OUTPUT:
            raise ConfigError(
                f"parameter {key!r}: {name} is shared by all outputs (each image is decoded once for all of "
                f"them); set it without the {output + '.'!r} prefix"
            )
        elif output not in own:
            raise ConfigError(
                f"parameter {key!r} names {output!r}, which is not an image output of this model "
                f"(image outputs: {list(image_outputs)})"
            )
        else:
            own[output][name] = text
    return common, own
