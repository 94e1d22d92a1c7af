"""``triton_python_backend_utils``, Triton's log and the model config (the stub's end: :mod:`.stub`).

``triton_python_backend_utils`` exists only inside the Python backend stub, so it is imported
lazily by :func:`pb_utils`, never at module import time.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any


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
