"""The preprocessing spec: one typed, validated description of what a ``preprocess`` model does.

It is read once from the ``parameters`` of the model's ``config.pbtxt`` (Triton hands them to the
Python backend as JSON) and drives both executors, the CuPy one on the GPU and the NumPy/Pillow one on
the CPU, so that they cannot disagree on what to do. One object holds it all,
:class:`~.config.PreprocessConfig`:

* ``outputs``: each image output with its :class:`~.outputs.OutputSpec` (size, resize rule,
  interpolation, mean/std, border, channel order, layout, dtype);
* the model-wide options, set once because every image is decoded once for all outputs: the
  ``executor`` and its ``cpu_threads``, ``decoding`` (:class:`~.options.DecoderOptions`, which the
  nvImageCodec decoder takes whole) and ``limits`` (:class:`~.options.Limits`);
* ``provenance``: the optional per-image outputs it offers (:mod:`.provenance`).

Every parameter is one row of :data:`~.table.PARAMETERS`: its name in ``config.pbtxt``, the field it
sets, how its text is read, its default and what it means; ``python -m tritonprep.spec`` prints the
table the docs show. Reading only converts text; every rule about values is checked once, when the
frozen dataclasses are built, whether from a config or in code.

**Several outputs from one decode.** An unprefixed parameter sets every output; ``<OUTPUT>.<parameter>``
overrides a per-output one for that output only (``EMBED_PIXELS.resize_shorter``). A ``preset``
(:data:`~.table.PRESETS`) fills in a known model family's preprocessing (``ultralytics``:
Ultralytics' LetterBox); explicit parameters override it.
"""

from __future__ import annotations

from .config import PreprocessConfig
from .options import EXECUTORS, GPU_DECODERS, GPU_FORMATS, KNOWN_FORMATS, DecoderOptions, Limits
from .outputs import (
    CHANNEL_ORDERS,
    DTYPES,
    INTERPOLATIONS,
    LAYOUTS,
    NUMPY_DTYPES,
    RESIZE_MODES,
    TRITON_DTYPES,
    OutputSpec,
)
from .provenance import PROVENANCE, PROVENANCE_SUFFIXES, ProvenanceOutput, provenance_of, provenance_table
from .table import PARAMETERS, PER_OUTPUT, PRESETS, RETIRED, output_parameters, parameter_table

__all__ = [
    "CHANNEL_ORDERS",
    "DTYPES",
    "EXECUTORS",
    "GPU_DECODERS",
    "GPU_FORMATS",
    "INTERPOLATIONS",
    "KNOWN_FORMATS",
    "LAYOUTS",
    "NUMPY_DTYPES",
    "PARAMETERS",
    "PER_OUTPUT",
    "PRESETS",
    "PROVENANCE",
    "PROVENANCE_SUFFIXES",
    "RESIZE_MODES",
    "RETIRED",
    "TRITON_DTYPES",
    "DecoderOptions",
    "Limits",
    "OutputSpec",
    "PreprocessConfig",
    "ProvenanceOutput",
    "output_parameters",
    "parameter_table",
    "provenance_of",
    "provenance_table",
]
