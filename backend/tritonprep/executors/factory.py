"""Picks the executor of a model instance from the spec and the instance's kind and device."""

from __future__ import annotations

import logging

from ..errors import RuntimeUnavailable
from ..spec import PreprocessSpec
from .base import Executor
from .cpu import CpuExecutor

log = logging.getLogger(__name__)


def create_executor(spec: PreprocessSpec, instance_kind: str = "CPU", device_id: int = 0) -> Executor:
    """The executor for a model instance.

    ``executor=auto`` uses the GPU executor on a GPU instance (Triton's ``KIND_GPU``, or
    ``KIND_AUTO`` on a machine with a GPU) and the CPU executor otherwise; ``gpu`` insists
    on the GPU (loading fails with the reason if it is unusable); ``cpu`` forces the CPU.
    """
    if spec.executor == "cpu" or (spec.executor == "auto" and instance_kind.upper() != "GPU"):
        return CpuExecutor(spec)
    try:
        from .gpu import GpuExecutor  # imports CuPy: only where a GPU executor is wanted

        return GpuExecutor(spec, device_id)
    except RuntimeUnavailable as e:
        if spec.executor == "gpu":
            raise
        log.warning("GPU executor unavailable on device %d (%s); using the CPU executor", device_id, e)
        return CpuExecutor(spec)
