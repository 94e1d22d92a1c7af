"""Turns at the GPU: a model's instances on one GPU run their network one at a time.

Every Python-backend instance is a process. Under CUDA MPS the two ``classifier`` instances' networks run
side by side, each at about half speed, so both finish at about the same time and then do their CPU work
(reading and answering requests, Triton's input and output) at the same time too, while the GPU has no
network to run. With turns, one instance holds the GPU for its network while the other does its CPU work,
as the stages of a pipeline do. A turn lasts until the network's results are on the host (its top-k, or its
logits where asked for: they are waited for with the network, in one wait).

A turn is an exclusive ``flock`` on a file in the server's work folder: the ``locks`` folder of the
instances' reports (:data:`tritonprep.reports.ENV`), one file per model and GPU. The kernel releases a
lock when its holder exits, however it exits, so a crashed instance never blocks the others; one that hangs
inside the GPU while it holds its turn stalls the model's other instances on that GPU (as a hung GPU would
anyway). A server not started by the launcher has no such folder, and its instances take no turns; neither
do they where the lock file cannot be opened (logged).

The config parameter ``network_turns`` turns it on (``gpu``) or off (``off``); CPU instances never take turns.
"""

from __future__ import annotations

import fcntl
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from .. import reports
from ..errors import ConfigError

log = logging.getLogger(__name__)

PARAMETER = "network_turns"
MODES = ("gpu", "off")
DEFAULT = "off"
#: the folder of the lock files, inside the instances' report folder
LOCKS = "locks"


class GpuTurns:
    """A context manager that holds the turn of model ``name`` on GPU ``device`` (no-op when disabled)."""

    def __init__(self, name: str, device: int, folder: Path | None) -> None:
        self.path = None if folder is None else folder / LOCKS / f"{name}-gpu{device}.lock"
        self._fd: int | None = None
        if self.path is not None:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            except OSError as e:  # serving matters more than the turns
                log.warning("%s: no turns at the GPU (cannot open %s: %s)", name, self.path, e)
                self.path = None

    @property
    def enabled(self) -> bool:
        """True when this instance takes turns."""
        return self._fd is not None

    def __enter__(self) -> GpuTurns:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def close(self) -> None:
        """Close the lock file (releasing a turn still held)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def turns_for(args: Mapping[str, str], params: Mapping[str, Any], env: Mapping[str, str] | None = None) -> GpuTurns:
    """The turns of this instance: from its config's ``network_turns`` (default :data:`DEFAULT`), its kind and
    device, and the server's report folder (``env``, by default this process's environment)."""
    mode = str(params.get(PARAMETER, DEFAULT)).strip().lower()
    if mode not in MODES:
        raise ConfigError(f"parameter {PARAMETER}: {mode!r} is not one of {', '.join(MODES)}")
    folder = reports.report_dir(env)
    on_gpu = args.get("model_instance_kind") == "GPU"
    if mode == "off" or not on_gpu or folder is None:
        if mode == "gpu" and on_gpu:
            log.info(
                "%s: no turns at the GPU (the server has no report folder: not started by the launcher)",
                args["model_name"],
            )
        return GpuTurns(args["model_name"], 0, None)
    return GpuTurns(args["model_name"], int(args["model_instance_device_id"]), folder)
