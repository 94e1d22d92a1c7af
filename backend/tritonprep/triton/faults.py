"""Fault injection for the isolation and supervision tests (off unless explicitly enabled).

With ``TRITONPREP_FAULT_INJECTION=1`` in the server's environment, the preprocess model
wraps its executor in :class:`FaultyExecutor`, which acts on images whose bytes start with
``TRITONPREP-FAULT:<action>`` followed by a newline and an optional real image, which is
then preprocessed as usual:

    raise          the executor raises an unexpected exception for the whole batch
    sleep:<s>      the executor sleeps <s> seconds (at most 60, once per batch), then goes on
    fail-instance  the executor reports an unrecoverable error (InstanceFailed)
    cuda-illegal-address  (GPU executor) a kernel writes through a wild pointer, which
                   poisons the CUDA context for good; the batch then runs and meets the
                   real CUDA error
    exit           the stub process dies at once (like a segfault)

Without the variable such bytes are an unknown file signature like any other garbage.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from typing import Any

from ..errors import InstanceFailed

log = logging.getLogger(__name__)

ENV = "TRITONPREP_FAULT_INJECTION"
PREFIX = b"TRITONPREP-FAULT:"


class InjectedFault(RuntimeError):
    """The unexpected exception raised by ``TRITONPREP-FAULT:raise``."""


def enabled() -> bool:
    """True when the environment asks for fault injection."""
    return os.environ.get(ENV, "") == "1"


def trigger(action: str, image: bytes = b"") -> bytes:
    """The bytes that trigger ``action`` and then carry ``image`` (for tests and scripts)."""
    return PREFIX + action.encode() + b"\n" + image


class FaultyExecutor:
    """Wraps an executor; acts on trigger images, passes everything to the wrapped executor."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = inner.name
        log.warning("fault injection is ON (%s=1): never enable it in production", ENV)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def run(self, images: Sequence[bytes], wanted: Any = None, *, synchronize: bool = True) -> Any:
        """Act on the trigger images of the batch, then run the wrapped executor on the real images."""
        images = list(images)
        sleep = 0.0
        for i, data in enumerate(images):
            if not data.startswith(PREFIX):
                continue
            head, _, images[i] = data[len(PREFIX) :].partition(b"\n")
            action = head.decode(errors="replace")
            if action == "raise":
                raise InjectedFault("injected fault: the executor raised for the whole batch")
            if action.startswith("sleep:"):  # once per batch, however many requests ask for it
                sleep = max(sleep, min(60.0, float(action.split(":", 1)[1])))
            elif action == "fail-instance":
                raise InstanceFailed("injected fault: unrecoverable device error")
            elif action == "cuda-illegal-address":
                inject = getattr(self.inner, "inject_illegal_address", None)
                if inject is None:
                    raise InjectedFault("injected fault: cuda-illegal-address needs the GPU executor")
                log.error("injected fault: a kernel writes to an illegal address")
                inject()
            elif action == "exit":
                log.error("injected fault: the stub process exits now")
                os._exit(71)
        time.sleep(sleep)
        return self.inner.run(images, wanted, synchronize=synchronize)

    def close(self) -> None:
        """Close the wrapped executor."""
        self.inner.close()
