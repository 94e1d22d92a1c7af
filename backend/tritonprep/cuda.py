"""CUDA in one place: CuPy's import with its install hint, the guard against sticky CUDA errors, and an
instance's share of the SMs and scheduling priority under MPS, and events other processes wait for.

Some CUDA errors poison the process's CUDA context for good (an illegal address, a device-side
assert, a launch failure: :data:`STICKY_CUDA_ERRORS`): every later call on that context fails too,
so retrying the batch, or the next request, cannot help, and the instance must be restarted. Every
GPU path (the GPU executor, ONNX Runtime's CUDA runtime, the TensorRT runtime, the embedder's cast)
runs its work under :func:`cuda_fault_guard`, which turns such an error into
:class:`~tritonprep.errors.InstanceFailed` naming the CUDA error; the Triton layer then takes the
instance out of service and the launcher restarts the server. Any other error passes through
unchanged (the batch is retried request by request).

An error is recognised as sticky (:func:`sticky_error`) from what each library reports:

* CuPy's ``CUDARuntimeError`` and ``CUDADriverError``: their ``status`` (``cudaErrorIllegalAddress:
  an illegal memory access was encountered``, status 700);
* ONNX Runtime's CUDA provider: its message's ``CUDA failure 700: ...``;
* anything else whose message names the error (``cudaErrorIllegalAddress``, ``CUDA_ERROR_ILLEGAL_ADDRESS``).

A library that reports failure without saying why (TensorRT's ``execute_async_v3`` returns False,
nvImageCodec raises a plain ``RuntimeError``) is judged by the guard's ``probe``, typically a
synchronize of the instance's stream, which raises CuPy's error if the context is poisoned.

Once the guard has raised, :func:`context_poisoned` says so for the rest of the process: the
instances' ``close`` then releases nothing on the GPU (a destructor that waits on a poisoned context's
stream or decoder threads can hang forever; the process is about to end and the driver frees it all).

Under MPS, :func:`set_mps_client` gives this process's CUDA context a share of the GPU's SMs
(``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``) and a scheduling priority (``CUDA_MPS_CLIENT_PRIORITY``: below normal lets
another client's kernels, the network's, take the SMs first), both read by the driver when the context is created:
call it first. :func:`context_sm_count` reads back how many SMs the context got (CUDA's execution affinity).

:class:`IpcEvent` is a CUDA event another process can open from its handle (``cudaIpcGetEventHandle``) and make
its own stream wait for: the network's turns (:mod:`tritonprep.triton.turns`) order two processes' GPU work on
the GPU itself, without either host waiting.

Likewise, once :func:`mark_process_ending` was called (by a Python-backend stub that ends itself right
after ``finalize``, :func:`tritonprep.triton.stub.finalize_instance`), ``close`` waits for the GPU work
and stops its threads but leaves memory, decoders and pinned buffers to the process's end, which frees
them at once (destroying nvImageCodec's decoders and freeing pinned memory one block at a time took most
of a GPU instance's 0.3-0.9 s release on the H100).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
from collections.abc import Callable, Iterator
from typing import Any

from .errors import InstanceFailed, RuntimeUnavailable

#: what to install for the GPU paths (CuPy, nvImageCodec, and ONNX Runtime's GPU build with the server extra)
GPU_EXTRA_HINT = "pip install 'tritonprep[gpu-cu13]' (or gpu-cu12 for CUDA 12)"

#: CUDA errors after which the context is unusable for the life of the process, by status (the same
#: numbers for the runtime and the driver API): (runtime API name, driver API name)
STICKY_CUDA_ERRORS: dict[int, tuple[str, str]] = {
    700: ("cudaErrorIllegalAddress", "CUDA_ERROR_ILLEGAL_ADDRESS"),
    702: ("cudaErrorLaunchTimeout", "CUDA_ERROR_LAUNCH_TIMEOUT"),
    709: ("cudaErrorContextIsDestroyed", "CUDA_ERROR_CONTEXT_IS_DESTROYED"),
    710: ("cudaErrorAssert", "CUDA_ERROR_ASSERT"),
    714: ("cudaErrorHardwareStackError", "CUDA_ERROR_HARDWARE_STACK_ERROR"),
    715: ("cudaErrorIllegalInstruction", "CUDA_ERROR_ILLEGAL_INSTRUCTION"),
    716: ("cudaErrorMisalignedAddress", "CUDA_ERROR_MISALIGNED_ADDRESS"),
    717: ("cudaErrorInvalidAddressSpace", "CUDA_ERROR_INVALID_ADDRESS_SPACE"),
    718: ("cudaErrorInvalidPc", "CUDA_ERROR_INVALID_PC"),
    719: ("cudaErrorLaunchFailure", "CUDA_ERROR_LAUNCH_FAILED"),
    999: ("cudaErrorUnknown", "CUDA_ERROR_UNKNOWN"),
}
_BY_NAME = {name: status for status, names in STICKY_CUDA_ERRORS.items() for name in names}
#: ONNX Runtime's CUDA provider words a failed CUDA call ``CUDA failure <status>: <description> ; GPU=...``
_ORT_FAILURE = re.compile(r"\bCUDA failure (\d+)\b")
_NAMES = re.compile(r"\b(" + "|".join(sorted(_BY_NAME, key=len, reverse=True)) + r")\b")
#: the CuPy exception types that carry a CUDA status
_CUPY_ERRORS = ("CUDARuntimeError", "CUDADriverError")


def import_cupy() -> Any:
    """CuPy, or :class:`~tritonprep.errors.RuntimeUnavailable` saying what to install."""
    try:
        import cupy
    except ImportError as e:
        raise RuntimeUnavailable(f"CuPy is not installed ({e}); {GPU_EXTRA_HINT}") from None
    return cupy


#: the GPUs on which this process's CUDA context holds a sticky error (set by :func:`raise_if_sticky`)
_POISONED: set[int] = set()


#: whether this process ends right after the current teardown (set by :func:`mark_process_ending`)
_ENDING: list[bool] = [False]


def mark_process_ending() -> None:
    """Say that this process ends right after the teardown now starting: ``close`` methods release only what
    the process's end does not (they wait for GPU work and stop threads)."""
    _ENDING[0] = True


def process_ending() -> bool:
    """Whether :func:`mark_process_ending` was called in this process."""
    return _ENDING[0]


def context_poisoned(device: int | None = None) -> bool:
    """Whether a sticky CUDA error was seen on ``device`` (any GPU where None) in this process."""
    return bool(_POISONED) if device is None else device in _POISONED


def note_if_sticky(error: BaseException, device: int) -> bool:
    """At teardown, where nothing may raise: mark ``device``'s context poisoned if ``error`` is sticky (work left
    unawaited, e.g. a ``classify_fused`` execute whose every request was refused, can surface it only now)."""
    if sticky_error(error) is None:
        return False
    _POISONED.add(device)
    return True


def sticky_status(status: int) -> str | None:
    """The runtime API name of CUDA status ``status`` if it is sticky (``700`` -> ``cudaErrorIllegalAddress``)."""
    names = STICKY_CUDA_ERRORS.get(status)
    return names[0] if names else None


def sticky_error(error: BaseException) -> str | None:
    """The name of the sticky CUDA error ``error`` reports (see the module's list), or None."""
    status = getattr(error, "status", None)
    if type(error).__name__ in _CUPY_ERRORS and isinstance(status, int):
        return sticky_status(status)
    text = str(error)
    match = _ORT_FAILURE.search(text)
    if match:
        return sticky_status(int(match.group(1)))
    match = _NAMES.search(text)
    return sticky_status(_BY_NAME[match.group(1)]) if match else None


def raise_if_sticky(error: BaseException, *, device: int, what: str, probe: Callable[[], object] | None = None) -> None:
    """Raise :class:`~tritonprep.errors.InstanceFailed` if ``error``, or else ``probe()`` run after it,
    reports a sticky CUDA error; return otherwise (the caller re-raises ``error``)."""
    name = sticky_error(error)
    cause: BaseException = error
    if name is None and probe is not None:
        try:
            probe()
        except Exception as e:  # noqa: BLE001 - only classified: a probe that fails otherwise says nothing
            name, cause = sticky_error(e), e
    if name is not None:
        _POISONED.add(device)
        detail = f"{cause}" if cause is error else f"{cause} (after {type(error).__name__}: {error})"
        raise InstanceFailed(
            f"CUDA error {name} on GPU {device} in {what}: {detail}; this process's CUDA context is unusable "
            "for good, so the instance is taken out of service and restarted"
        ) from None


@contextlib.contextmanager
def cuda_fault_guard(device: int, what: str, probe: Callable[[], object] | None = None) -> Iterator[None]:
    """Run the block; a sticky CUDA error it raises (or that ``probe`` finds after any error it raises)
    becomes :class:`~tritonprep.errors.InstanceFailed`; every other error is raised unchanged.

    ``what`` names the path for the message (``"the GPU executor"``); ``probe`` is what reveals a
    poisoned context after an error that does not say (a synchronize of the stream the work ran on).
    """
    try:
        yield
    except InstanceFailed:
        raise
    except Exception as error:  # noqa: BLE001 - classified, then re-raised unchanged unless sticky
        raise_if_sticky(error, device=device, what=what, probe=probe)
        raise


#: the MPS client's share of the SMs, in percent, as the CUDA driver reads it when a context is created
MPS_THREADS_ENV = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
#: the MPS client's scheduling priority, as the driver reads it when a context is created: 0 normal, 1 below normal
MPS_PRIORITY_ENV = "CUDA_MPS_CLIENT_PRIORITY"


def set_mps_client(sm_share: int = 0, priority: int = 0) -> None:
    """Set what the CUDA context this process creates next reads as an MPS client (without MPS the driver ignores
    both): ``sm_share`` % of the GPU's SMs, and ``priority`` (1: below normal, so that the kernels of normal clients
    are scheduled first). 0 leaves that variable of the environment as it is (the server's, or the driver's default).
    """
    if sm_share:
        os.environ[MPS_THREADS_ENV] = str(sm_share)
    if priority:
        os.environ[MPS_PRIORITY_ENV] = str(priority)


def context_sm_count() -> int | None:
    """The SMs the current CUDA context may use (its execution affinity; fewer than the GPU's under an MPS share),
    or None where the driver does not say (no context, no GPU, a driver before CUDA 11.4)."""

    class SmCount(ctypes.Structure):  # CUexecAffinityParam with its smCount member
        _fields_ = [("type", ctypes.c_int), ("val", ctypes.c_uint)]

    try:
        lib = ctypes.CDLL("libcuda.so.1")
        query = lib.cuCtxGetExecAffinity
    except (OSError, AttributeError):
        return None
    param = SmCount()
    if query(ctypes.byref(param), 0) != 0:  # CU_EXEC_AFFINITY_TYPE_SM_COUNT
        return None
    return int(param.val)


#: cudaEventDisableTiming | cudaEventInterprocess: what an event shared between processes must be created with
IPC_EVENT_FLAGS = 0x2 | 0x4


class IpcEvent:
    """A CUDA event of GPU ``device`` that other processes can wait for: :meth:`record` it on a stream of that GPU,
    hand :attr:`handle` (64 bytes) to them; they :meth:`wait` for it on a stream of theirs. CUDA errors raise
    CuPy's ``CUDARuntimeError``."""

    def __init__(self, device: int) -> None:
        cp = import_cupy()
        self._rt = cp.cuda.runtime
        self._device = cp.cuda.Device(device)
        with self._device:
            #: this process's own event
            self.ptr: int = self._rt.eventCreateWithFlags(IPC_EVENT_FLAGS)
            try:
                self.handle: bytes = bytes(self._rt.ipcGetEventHandle(self.ptr))
            except Exception:
                self._rt.eventDestroy(self.ptr)
                raise
        self._opened: dict[bytes, int] = {}  # other processes' events, by handle

    def record(self, stream_ptr: int) -> None:
        """Mark the end of what ``stream_ptr`` (a stream of this event's GPU) holds so far."""
        with self._device:
            self._rt.eventRecord(self.ptr, stream_ptr)

    def wait(self, handle: bytes, stream_ptr: int) -> None:
        """Make ``stream_ptr`` wait, on the GPU, for the last record of another process's event ``handle``."""
        with self._device:
            event = self._opened.get(handle)
            if event is None:
                event = self._opened[handle] = self._rt.ipcOpenEventHandle(handle)
            self._rt.streamWaitEvent(stream_ptr, event, 0)

    def forget(self, handle: bytes) -> None:
        """Drop an opened event whose process has ended (its handle means nothing any more)."""
        self._opened.pop(handle, None)

    def close(self) -> None:
        """Destroy the events (not on a poisoned context, nor in a process about to end: the driver frees them)."""
        events, self._opened = [*self._opened.values(), self.ptr], {}
        if context_poisoned() or process_ending():
            return
        with self._device:
            for event in events:
                with contextlib.suppress(Exception):  # one that will not go must not keep the others
                    self._rt.eventDestroy(event)
