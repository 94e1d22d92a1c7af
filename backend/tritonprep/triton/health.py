"""An instance's health: what it loaded (its report to the launcher), taking it out of service after an
unrecoverable error, and trimming its heap."""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .. import reports
from ..memory import instance_budget_mb

log = logging.getLogger(__name__)

_failure: str | None = None
_failure_lock = threading.Lock()
#: exit status of a stub taken out of service by fail_instance (EX_SOFTWARE)
FAILED_INSTANCE_EXIT_CODE = 70


def server_ready_probe() -> Callable[[], bool] | None:
    """What work deferred until the server is ready polls (the classifier's late buckets): the launcher's word in the
    start's report folder (:func:`tritonprep.reports.server_ready`); None where no launcher started the server."""
    if reports.server_ready() is None:
        return None
    return lambda: bool(reports.server_ready())


def report_loaded(
    args: Mapping[str, str],
    *,
    runtime: str,
    buckets: Sequence[int] = (),
    gpu_memory_mb: str | None = None,
    timings: Mapping[str, float] | None = None,
) -> None:
    """Tell the launcher what this instance loaded, at the end of ``initialize`` (:func:`tritonprep.reports.
    write_instance`: the start-up summary's row; a no-op where no launcher asked for reports).

    ``gpu_memory_mb`` is the config's parameter as written (one number, or MiB by largest bucket).
    """
    kind = args["model_instance_kind"]
    reports.write_instance(
        args["model_name"],
        args["model_instance_name"],
        kind,
        device=int(args["model_instance_device_id"]) if kind == "GPU" else None,
        runtime=runtime,
        buckets=buckets,
        gpu_memory_mb=instance_budget_mb(gpu_memory_mb, buckets) if gpu_memory_mb else None,
        timings=timings,
    )


def fail_instance(
    reason: str, *, delay_s: float = 0.5, sticky_cuda: bool | None = None, device: int | None = None
) -> None:
    """Take this model instance out of service after an unrecoverable error.

    For errors after which the process cannot be trusted (a CUDA illegal address or other
    sticky CUDA error poisons the context for good): from now on every ``execute`` of this
    instance answers all its requests with an error naming ``reason``, and after ``delay_s``
    (time for the responses of the current call to leave) the stub process exits with
    status 70. Triton 2.51 does not restart a dead stub and keeps reporting the model ready,
    so the embedded launcher's supervisor (:mod:`tritonprep.launcher.supervise`) watches the stub
    processes and restarts ``tritonserver``. Executors either call this or raise
    :class:`~tritonprep.errors.InstanceFailed`, which the Triton layer turns into this call.

    The supervisor learns why from a fault report (:func:`tritonprep.reports.write_fault`, written
    before the stub exits): ``sticky_cuda`` and ``device`` say whether a sticky CUDA error hit and on
    which GPU (read from ``reason`` where not given), which under CUDA MPS poisons every client of that
    GPU's MPS server, so the launcher ends them all before it restarts the server.
    """
    global _failure
    with _failure_lock:
        if _failure is not None:
            return
        _failure = reason
    reports.write_fault(reason, sticky_cuda=sticky_cuda, device=device)
    log.error("model instance out of service: %s; its stub exits in %.1f s and the server restarts", reason, delay_s)
    threading.Thread(target=_exit_after, args=(delay_s,), name="tritonprep-fail-instance", daemon=True).start()


def instance_failure() -> str | None:
    """The reason given to :func:`fail_instance`, or None while the instance is healthy."""
    return _failure


def _exit_after(delay_s: float) -> None:
    time.sleep(delay_s)
    for handler in logging.getLogger("tritonprep").handlers:
        handler.flush()
    os._exit(FAILED_INSTANCE_EXIT_CODE)


def _malloc_trim() -> Any:
    """glibc's ``malloc_trim``, or None on another C library."""
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None


class HeapTrimmer:
    """Hands freed heap memory back to the OS at most once per ``interval_s``.

    glibc keeps what a large batch freed (decoded pictures, output buffers) in its arenas,
    so a stub's resident memory sits at the high-water mark of the largest batch it ever
    ran and swings by 50-200 MB with the image mix, which hides real leaks and wastes
    memory. ``malloc_trim(0)`` after a batch costs about 1 ms; measured on the CPU executor
    over 8,000 mixed batches: 240-300 MB without it, a steady 88 MB with it.
    """

    def __init__(self, interval_s: float = 1.0) -> None:
        self.interval_s = interval_s
        self._trim = _malloc_trim()
        self._last = 0.0

    def maybe_trim(self) -> None:
        """Trim if the last trim is older than the interval."""
        now = time.monotonic()
        if self._trim is not None and now - self._last >= self.interval_s:
            self._last = now
            self._trim(0)
