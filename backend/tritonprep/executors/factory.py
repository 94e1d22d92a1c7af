"""Picks the executor of a model instance from the spec and the instance's kind and device."""

from __future__ import annotations

import logging

from ..errors import RuntimeUnavailable
from ..spec import OutputSpec, PreprocessConfig
from .base import Executor, as_config
from .cpu import CpuExecutor

log = logging.getLogger(__name__)


def create_executor(
    spec: OutputSpec | PreprocessConfig, instance_kind: str = "CPU", device_id: int = 0, *, warm_up: bool = True
) -> Executor:
    """The executor for a model instance (``warm_up`` False: a GPU executor is warmed up by the caller, with
    its ``warm_up()``).

    ``executor=auto`` uses the GPU executor on a GPU instance (Triton's ``KIND_GPU``, or
    ``KIND_AUTO`` on a machine with a GPU) and the CPU executor otherwise; ``gpu`` insists
    on the GPU (loading fails with the reason if it is unusable); ``cpu`` forces the CPU. The
    choice is model-wide: every image output of a config runs on the same executor.
    """
    config = as_config(spec)
    if config.executor == "cpu" or (config.executor == "auto" and instance_kind.upper() != "GPU"):
        return CpuExecutor(config)
    try:
        from .gpu import GpuExecutor  # imports CuPy: only where a GPU executor is wanted

        return GpuExecutor(config, device_id, warm_up=warm_up)
    except RuntimeUnavailable as e:
        if config.executor == "gpu":
            raise
        log.warning("GPU executor unavailable on device %d (%s); using the CPU executor", device_id, e)
        return CpuExecutor(config)
