"""How the launcher's own processes log (``tritonprep serve``, the watchdog): one line per record, the time,
who, and the level where it matters (``WARNING:`` / ``ERROR:``), so that a log can be searched for problems
the way tritonserver's ``W``/``E`` lines can."""

from __future__ import annotations

import logging


class LevelFormatter(logging.Formatter):
    """``HH:MM:SS.mmm <who>: message``, with ``WARNING: `` or ``ERROR: `` before the message at those levels."""

    def __init__(self, who: str) -> None:
        super().__init__(f"%(asctime)s.%(msecs)03d {who}: %(message)s", datefmt="%H:%M:%S")

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 - logging's name
        text = super().formatMessage(record)
        if record.levelno >= logging.WARNING:
            head, sep, message = text.partition(": ")
            return f"{head}{sep}{record.levelname}: {message}"
        return text


def setup(who: str) -> None:
    """Log INFO and above to stderr in the launcher's format (replacing any handler set before)."""
    handler = logging.StreamHandler()
    handler.setFormatter(LevelFormatter(who))
    logging.basicConfig(level=logging.INFO, handlers=[handler], force=True)
