"""The end of a Python-backend stub process: a model's ``finalize``, after which the stub ends itself.

Triton finalizes a model's instances one after another, and for each the Python backend waits one
second before it asks the stub to finalize (``UpdateHealth`` in python_backend's ``stub_launcher.cc``),
then for the stub to exit: its health thread (up to 0.3 s), the interpreter's teardown and the CUDA
context's. The stub answers Triton's finalize request before our ``finalize`` runs, so a stub that
exits at the end of ``finalize`` skips only that teardown, which the process's end does anyway
(:func:`finalize_instance`; measured on the H100: 1.7-2.3 s an instance before, 1.28 s after).

What makes that safe:

* **GPU work.** Under CUDA MPS a client may end only when none of its GPU work is outstanding: the
  current device is synchronized first (the stub runs ``initialize``, ``execute`` and ``finalize`` on
  its main thread, where every GPU runtime made its device current). Where the synchronize fails, or
  the context holds a sticky error (:func:`tritonprep.cuda.context_poisoned`), the stub ends the usual
  way and the supervisor ends such clients.
* **Triton's log.** ``pb_utils.Logger`` hands a record to a stub thread that sends it to the server and
  waits for its answer; a stub that ends in the middle of that exchange can leave the server waiting.
  So while an instance that ends itself finalizes, its records go to the stub's stderr (tritonserver's,
  in Triton's own line format), and Triton's logger has been idle since the last request (the Python
  backend's one-second wait comes before ``finalize``).
* **Memory.** :func:`tritonprep.cuda.mark_process_ending` tells the ``close`` methods that the process
  ends right after: they wait for their GPU work and stop their threads, and leave decoders, pools and
  pinned buffers to the process's end.

Outside a stub (tests, tools that import a model) nothing of this happens.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

from ..cuda import context_poisoned, mark_process_ending
from .pb import teardown_logging

log = logging.getLogger(__name__)

#: the executable of the Python backend's stub process (one per model instance)
STUB_EXECUTABLE = "triton_python_backend_stub"


def in_stub_process() -> bool:
    """Whether this process is a Python-backend stub (not a test or a tool that imports a model)."""
    try:
        return Path("/proc/self/exe").resolve().name == STUB_EXECUTABLE
    except OSError:
        return False


def ends_itself() -> bool:
    """Whether this process ends itself after ``finalize``: a stub whose CUDA context holds no sticky error."""
    return in_stub_process() and not context_poisoned()


class StderrTritonFormatter(logging.Formatter):
    """Triton's line format (``I1125 18:35:06.640456 2591 file.py:43] "..."``) for records written to stderr."""

    def format(self, record: logging.LogRecord) -> str:
        level = "E" if record.levelno >= logging.ERROR else "W" if record.levelno >= logging.WARNING else "I"
        stamp = time.strftime("%m%d %H:%M:%S", time.localtime(record.created)) + f".{int(record.msecs * 1000):06d}"
        text = f"{record.name}: {record.getMessage()}"
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return f'{level}{stamp} {record.process} {record.filename}:{record.lineno}] "{text}"'


def log_to_stderr() -> None:
    """Send this stub's ``tritonprep`` records to its stderr instead of Triton's logger."""
    teardown_logging()
    root = logging.getLogger("tritonprep")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(StderrTritonFormatter())
    root.addHandler(handler)
    root.propagate = False
    if root.level == logging.NOTSET:
        root.setLevel(logging.INFO)


def finalize_instance(close: Callable[[], None] | None = None) -> None:
    """A model's ``finalize``: release what the instance holds (``close``) and stop logging to Triton; then, in a
    stub whose release went well, end the process once its GPU work is done (:func:`end_stub_process`)."""
    ending = ends_itself()
    if ending:
        mark_process_ending()  # close() leaves memory and decoders to the process's end
        log_to_stderr()
    try:
        if close is not None:
            close()
    finally:
        teardown_logging()
    if ending:
        end_stub_process()


def end_stub_process() -> None:
    """End this stub process now, with exit code 0, once the current device is synchronized (see the module's
    description); return instead where that fails, so that the stub ends the usual way."""
    if not ends_itself():
        return
    cupy = sys.modules.get("cupy")
    if cupy is not None:
        try:
            errors = (cupy.cuda.runtime.CUDARuntimeError, cupy.cuda.driver.CUDADriverError)
            try:
                has_context = cupy.cuda.driver.ctxGetCurrent() != 0  # never creates one
            except errors:  # the driver was never initialised: no GPU work at all
                has_context = False
            if has_context:
                cupy.cuda.runtime.deviceSynchronize()
        except Exception as e:  # noqa: BLE001 - any failure here means: end the usual way
            log.warning("the GPU did not synchronize at the stub's end (%s): it ends the usual way", e)
            return
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(0)
