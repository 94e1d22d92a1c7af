"""``triton_python_backend_utils``, Triton's log and the model config.

``triton_python_backend_utils`` exists only inside the Python backend stub, so it is imported
lazily by :func:`pb_utils`, never at module import time.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ..cuda import context_poisoned, mark_process_ending

log = logging.getLogger(__name__)

#: the executable of the Python backend's stub process (one per model instance)
STUB_EXECUTABLE = "triton_python_backend_stub"


def pb_utils() -> Any:
    """The ``triton_python_backend_utils`` module of the running stub."""
    import triton_python_backend_utils  # provided by the Python backend stub

    return triton_python_backend_utils


class TritonLogHandler(logging.Handler):
    """Forwards Python ``logging`` records to Triton's log (``pb_utils.Logger``)."""

    def emit(self, record: logging.LogRecord) -> None:
        logger = pb_utils().Logger
        msg = self.format(record)
        if record.levelno >= logging.ERROR:
            logger.log_error(msg)
        elif record.levelno >= logging.WARNING:
            logger.log_warn(msg)
        elif record.levelno >= logging.INFO:
            logger.log_info(msg)
        else:
            logger.log_verbose(msg)


def setup_logging(level: int = logging.INFO) -> None:
    """Send the ``tritonprep`` loggers of this stub process to Triton's log (idempotent)."""
    root = logging.getLogger("tritonprep")
    if not any(isinstance(h, TritonLogHandler) for h in root.handlers):
        handler = TritonLogHandler()
        handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
        root.addHandler(handler)
        root.setLevel(level)
        root.propagate = False


def teardown_logging() -> None:
    """Stop sending this stub's log records to Triton's log: the last call of a model's ``finalize``.

    After ``finalize`` the stub releases its logger before the model's objects and the interpreter go; a
    record logged then (by a destructor, a thread still winding down) goes to stderr instead of a logger
    that is no longer there.
    """
    root = logging.getLogger("tritonprep")
    for handler in [h for h in root.handlers if isinstance(h, TritonLogHandler)]:
        root.removeHandler(handler)
    root.propagate = True


def in_stub_process() -> bool:
    """Whether this process is a Python-backend stub (not a test or a tool that imports a model)."""
    try:
        return Path("/proc/self/exe").resolve().name == STUB_EXECUTABLE
    except OSError:
        return False


def finalize_instance(close: Callable[[], None] | None = None) -> None:
    """A model's ``finalize``: release what the instance holds (``close``), stop logging to Triton, and end
    the stub process once its GPU work is done (:func:`end_stub_process`)."""
    ending = ends_itself()
    if ending:
        mark_process_ending()  # close() leaves memory and decoders to the process's end
    try:
        if close is not None:
            close()
    except Exception:
        log.exception("finalize: releasing the instance failed")  # said here: the stub may end before it is
        raise
    finally:
        teardown_logging()
        if ending:
            end_stub_process()


def ends_itself() -> bool:
    """Whether this process ends itself after ``finalize``: a stub whose CUDA context holds no sticky error."""
    return in_stub_process() and not context_poisoned()


def end_stub_process() -> None:
    """End this stub process now, with exit code 0, when its GPU is idle: the last step of ``finalize``.

    Triton finalizes the instances of a model one after another, and for each the Python backend
    waits one second before it asks the stub to finalize (``UpdateHealth``), then for the stub to
    exit: its health thread (up to 0.3 s), the interpreter's teardown and the CUDA context's. The
    stub has answered Triton's finalize request before our ``finalize`` runs, so exiting here skips
    only that teardown, which the process's end does anyway: measured on the H100, ~0.5-1 s per GPU
    instance, 2-4 s of a four-instance model's unload. Under MPS a client may end this way only when
    none of its GPU work is outstanding, so the device is synchronized first; where that fails or the
    context holds a sticky error the stub ends the usual way (the supervisor ends such clients).
    Outside a stub (tests, tools) nothing happens.
    """
    if not ends_itself():
        return
    cupy = sys.modules.get("cupy")
    if cupy is not None:
        errors = (cupy.cuda.runtime.CUDARuntimeError, cupy.cuda.driver.CUDADriverError)
        try:
            has_context = cupy.cuda.driver.ctxGetCurrent() != 0  # never creates one
        except errors:  # the driver was never initialised: no GPU work at all
            has_context = False
        try:
            if has_context:
                cupy.cuda.runtime.deviceSynchronize()
        except errors as e:
            log.info("the GPU did not synchronize at exit (%s): the stub ends the usual way", e)
            return
    for handler in logging.getLogger().handlers:
        handler.flush()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(0)


def model_config(args: Mapping[str, str]) -> dict[str, Any]:
    """The model's configuration as a dict (Triton passes it as JSON); also routes logging to Triton."""
    setup_logging()
    return json.loads(args["model_config"])


def parameters(config: Mapping[str, Any]) -> dict[str, str]:
    """The ``parameters`` of a model config as plain ``{key: string_value}``."""
    return {k: v.get("string_value", "") for k, v in (config.get("parameters") or {}).items()}


def output_dims(config: Mapping[str, Any]) -> dict[str, list[int]]:
    """``{output name: dims}`` of a model config."""
    return {o["name"]: [int(d) for d in o["dims"]] for o in config.get("output", [])}
