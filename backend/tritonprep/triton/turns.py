"""Turns at the GPU: a model's instances on one GPU run their network one at a time.

Every Python-backend instance is a process. Under CUDA MPS the two ``classifier`` instances' networks run
side by side, each at about half speed, so both finish at about the same time and then do their CPU work
(reading and answering requests, Triton's input and output) at the same time too, while the GPU has no
network to run. With turns, one instance holds the GPU for its network while the other does its CPU work,
as the stages of a pipeline do.

A turn is an exclusive ``flock`` on a file in the server's work folder: the ``locks`` folder of the
instances' reports (:data:`tritonprep.reports.ENV`), one file per model and GPU. The kernel releases a
lock when its holder exits, however it exits, so a crashed instance never blocks the others; one that hangs
inside the GPU while it holds its turn stalls the model's other instances on that GPU (as a hung GPU would
anyway). A server not started by the launcher has no such folder, and its instances take no turns; neither
do they where the lock file cannot be opened (logged).

The config parameter ``network_turns`` says how long a turn lasts:

* ``gpu``: until the network's results are on the host (its top-k, or its logits where asked for: they are
  waited for with the network, in one wait). Between two turns the GPU waits for the next holder's host to
  copy its inputs and launch its network.
* ``ordered``: only while the holder enqueues its work. It makes its stream wait, on the GPU, for the last
  holder's work (an :class:`~tritonprep.cuda.IpcEvent` whose handle the lock file holds), enqueues its
  network and top-k, records its own event, writes its handle and hands the turn over; its host then waits
  for its own work alone. The networks still run one at a time, back to back. An instance whose own event
  cannot be made or recorded, or whose runtime has no CUDA stream, takes ``gpu`` turns instead (logged); a
  last holder that has exited, or whose event cannot be opened, is not waited for.
* ``off``: no turns. CPU instances never take turns.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from .. import reports
from ..cuda import IpcEvent
from ..errors import ConfigError

log = logging.getLogger(__name__)

PARAMETER = "network_turns"
MODES = ("gpu", "ordered", "off")
DEFAULT = "off"
#: the folder of the lock files, inside the instances' report folder
LOCKS = "locks"


class GpuTurns:
    """The turns of model ``name`` on GPU ``device``: :meth:`take` (or ``with``) holds one (no-op when disabled)."""

    def __init__(self, name: str, device: int, folder: Path | None, ordered: bool = False) -> None:
        self.path = None if folder is None else folder / LOCKS / f"{name}-gpu{device}.lock"
        self._fd: int | None = None
        if self.path is not None:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            except OSError as e:  # serving matters more than the turns
                log.warning("%s: no turns at the GPU (cannot open %s: %s)", name, self.path, e)
                self.path = None
        self.name = name
        #: whether turns end once the work is enqueued (the GPU keeps the order); False after an event failed
        self.ordered = ordered and self._fd is not None
        self._event: IpcEvent | None = None
        self._held = False

    @property
    def enabled(self) -> bool:
        """True when this instance takes turns."""
        return self._fd is not None

    def __enter__(self) -> GpuTurns:
        self._lock()
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        self._unlock()

    @contextlib.contextmanager
    def take(self, stream: Any = None) -> Iterator[Callable[[], None]]:
        """Hold a turn for work enqueued on CuPy ``stream``; yields ``hand_over``, to call once the work is
        enqueued: with ordered turns it ends the turn there, otherwise it does nothing and the turn ends with the
        block (a runtime without a CUDA stream takes whole turns)."""
        self._lock()
        try:
            if self.ordered and stream is None:
                self._fall_back("its runtime has no CUDA stream to order")
            ordered = self.ordered and self._wait_for_last(stream)
            yield (lambda: self._hand_over(stream.ptr)) if ordered else (lambda: None)
        finally:
            self._unlock()

    def _lock(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            self._held = True

    def _unlock(self) -> None:
        if self._fd is not None and self._held:
            self._held = False
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def _last(self) -> tuple[int | None, bytes]:
        """The last ordered holder named in the lock file: its pid and its event's handle (None: nobody)."""
        pid, _, handle = os.pread(self._fd, 256, 0).decode("ascii", "replace").partition(" ")  # type: ignore[arg-type]
        try:
            return int(pid), bytes.fromhex(handle.strip())
        except ValueError:
            return None, b""

    def _clear(self, only_mine: bool = False) -> None:
        """Empty the lock file (``only_mine``: only where it names this process), under the turn."""
        if not only_mine or self._last()[0] == os.getpid():
            os.ftruncate(self._fd, 0)  # type: ignore[arg-type]

    def _fall_back(self, reason: str) -> None:
        log.warning("%s: no ordered turns (%s); turns last until the results are on the host", self.name, reason)
        self.ordered = False
        self._clear(only_mine=True)  # nobody waits for an event of this one any more

    def _wait_for_last(self, stream: Any) -> bool:
        """Make ``stream`` wait, on the GPU, for the last holder's work; False where this instance has no event."""
        try:
            if self._event is None:
                self._event = IpcEvent(stream.device_id)
        except Exception as e:  # noqa: BLE001 - CuPy's CUDA errors (no IPC here): whole turns instead
            self._fall_back(f"no CUDA IPC event: {e}")
            return False
        pid, handle = self._last()
        if pid is None or pid == os.getpid():
            return True  # nobody, or this process: its own stream keeps the order
        if alive(pid):
            try:
                self._event.wait(handle, stream.ptr)
                return True
            except Exception as e:  # noqa: BLE001 - CuPy's CUDA errors: this turn is not ordered after that one
                log.warning("%s: cannot wait for the event of process %d (%s); not waiting for it", self.name, pid, e)
        self._event.forget(handle)  # its process has ended, or its event cannot be opened: the handle is no use
        self._clear()
        return True

    def _hand_over(self, stream_ptr: int) -> None:
        """End the turn once this instance's work is enqueued: the next holder's stream waits for it on the GPU."""
        if not self._held or self._event is None:
            return
        try:
            self._event.record(stream_ptr)
        except Exception as e:  # noqa: BLE001 - CuPy's CUDA errors: this turn lasts to the end of the block
            self._fall_back(f"cannot record its event: {e}")
            return
        self._clear()
        os.pwrite(self._fd, f"{os.getpid()} {self._event.handle.hex()}".encode("ascii"), 0)  # type: ignore[arg-type]
        self._unlock()

    def close(self) -> None:
        """Close the lock file (releasing a turn still held; no longer naming this process where the turn is free
        now) and the event."""
        try:
            if self._fd is not None and self._event is not None:
                with contextlib.suppress(BlockingIOError):
                    fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    self._clear(only_mine=True)
        finally:
            try:
                if self._event is not None:
                    self._event.close()
            finally:
                self._event = None
                if self._fd is not None:
                    os.close(self._fd)
                    self._fd = None


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists (signal 0 checks without sending anything)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def turns_for(args: Mapping[str, str], params: Mapping[str, Any], env: Mapping[str, str] | None = None) -> GpuTurns:
    """The turns of this instance: from its config's ``network_turns`` (default :data:`DEFAULT`), its kind and
    device, and the server's report folder (``env``, by default this process's environment)."""
    mode = str(params.get(PARAMETER, DEFAULT)).strip().lower()
    if mode not in MODES:
        raise ConfigError(f"parameter {PARAMETER}: {mode!r} is not one of {', '.join(MODES)}")
    folder = reports.report_dir(env)
    on_gpu = args.get("model_instance_kind") == "GPU"
    if mode == "off" or not on_gpu or folder is None:
        if mode != "off" and on_gpu:
            log.info(
                "%s: no turns at the GPU (the server has no report folder: not started by the launcher)",
                args["model_name"],
            )
        return GpuTurns(args["model_name"], 0, None)
    return GpuTurns(args["model_name"], int(args["model_instance_device_id"]), folder, ordered=mode == "ordered")
