"""Reports that model instances leave for the launcher: what each instance loaded, and why one failed.

The embedded launcher sets :data:`ENV` (``TRITONPREP_REPORT_DIR``, a folder inside the work folder of
each server start) for tritonserver and its stubs; each model instance writes into it, as JSON:

* ``<dir>/instances/<instance name>.json`` at the end of ``initialize`` (:func:`write_instance`):
  ``model``, ``instance``, ``pid``, ``kind``, ``device``, ``runtime``, ``buckets``, ``gpu_memory_mb``,
  ``timings`` ({phase: seconds}); the launcher's start-up summary reads them.
* ``<dir>/server-ready`` (empty), written by the launcher once the server answers ready
  (:func:`mark_server_ready`): work an instance defers until then (the classifier's late batch buckets, whose first
  runs would otherwise slow the other models' start) asks :func:`server_ready`.
* ``<dir>/faults/<pid>.json`` when an instance takes itself out of service
  (:func:`tritonprep.triton.health.fail_instance` calls :func:`write_fault`): ``instance``, ``reason``,
  ``sticky_cuda`` (a CUDA error that poisoned the process's context) and ``device`` (the GPU); the
  supervisor reads them to know why a stub is going and which GPU a sticky CUDA error hit.

A report's ``device`` is the GPU as the launcher numbers them (``--gpus``), not as the stub does: a
server of a multi-GPU host sees only its own GPU, as device 0. The launcher says which GPUs a server
serves in :data:`GPUS_ENV` (``TRITONPREP_GPUS``, e.g. ``2`` or ``0,1``), and :func:`host_gpu` maps a
stub's device to the launcher's number (the metrics' ``device`` label uses it too).

Writing is a no-op without the variable (a server that the launcher did not start) and never raises:
a report that cannot be written is logged, and the instance goes on. Files appear whole (written
beside, then renamed). The lowest layer: it imports nothing of tritonprep.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

ENV = "TRITONPREP_REPORT_DIR"
#: the launcher's numbers of the GPUs a server serves, in the server's device order ("2", "0,1")
GPUS_ENV = "TRITONPREP_GPUS"
INSTANCES = "instances"
FAULTS = "faults"
SERVER_READY = "server-ready"
#: how the executors word a sticky CUDA error: "CUDA error [<name>] on GPU <n>..." (the GPU executor, the runtimes)
_STICKY = re.compile(r"\bCUDA error\b[^:;]*? on GPU (\d+)\b")
#: the instance this process serves, once :func:`write_instance` ran (a stub serves one instance)
_identity: dict[str, Any] = {}


@dataclass(frozen=True)
class InstanceReport:
    """What one model instance loaded (see the module's description)."""

    model: str
    instance: str
    pid: int
    kind: str  # "GPU" or "CPU"
    device: int | None = None
    runtime: str = ""
    buckets: tuple[int, ...] = ()
    gpu_memory_mb: int | None = None
    timings: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class FaultReport:
    """Why one instance took itself out of service."""

    instance: str
    reason: str
    sticky_cuda: bool
    device: int | None
    pid: int = 0


def report_dir(env: Mapping[str, str] | None = None) -> Path | None:
    """The folder named by :data:`ENV` (in ``env``, by default this process's), or None."""
    value = (os.environ if env is None else env).get(ENV)
    return Path(value) if value else None


def mark_server_ready(folder: Path) -> None:
    """Say in ``folder`` (a start's report folder) that its server is ready; never raises."""
    try:  # the start's own folder only: one removed by a stop meanwhile is not made again (nothing would remove it)
        folder.mkdir(exist_ok=True)
        (folder / SERVER_READY).touch()
    except OSError as e:
        log.warning("cannot mark the server ready in %s: %s", folder, e)


def server_ready(env: Mapping[str, str] | None = None) -> bool | None:
    """Whether the launcher said this server is ready (:func:`mark_server_ready`); None where no launcher started it
    (no report folder): nothing will say so."""
    folder = report_dir(env)
    return None if folder is None else (folder / SERVER_READY).exists()


def host_gpu(device: int | None, env: Mapping[str, str] | None = None) -> int | None:
    """The launcher's number of this process's CUDA ``device`` (as it is where :data:`GPUS_ENV` is unset,
    malformed or too short)."""
    text = (os.environ if env is None else env).get(GPUS_ENV, "")
    numbers = [int(v) for v in text.split(",") if v.strip().isdigit()]
    if device is None or not 0 <= device < len(numbers) or len(numbers) != len(text.split(",")):
        return device
    return numbers[device]


def _write(path: Path, data: Mapping[str, Any]) -> Path | None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=1))
        os.replace(tmp, path)
    except OSError as e:  # a report never fails the instance
        log.warning("cannot write the report %s: %s", path, e)
        return None
    return path


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name) or "instance"


def write_instance(
    model: str,
    instance: str,
    kind: str,
    *,
    device: int | None = None,
    runtime: str = "",
    buckets: Sequence[int] = (),
    gpu_memory_mb: int | None = None,
    timings: Mapping[str, float] | None = None,
) -> Path | None:
    """Report what this instance loaded (call at the end of ``initialize``); the file, or None."""
    device = host_gpu(device)
    _identity.update(instance=instance, device=device)
    folder = report_dir()
    if folder is None:
        return None
    report = InstanceReport(
        model, instance, os.getpid(), kind, device, runtime, tuple(buckets), gpu_memory_mb, dict(timings or {})
    )
    return _write(folder / INSTANCES / f"{_safe(instance)}.json", asdict(report))


def describe_fault(reason: str) -> tuple[bool, int | None]:
    """(sticky CUDA error, device) as the executors word it: ``CUDA error [<name>] on GPU <n> ...``."""
    m = _STICKY.search(reason)
    return (m is not None, None if m is None else int(m[1]))


def write_fault(
    reason: str, *, sticky_cuda: bool | None = None, device: int | None = None, instance: str | None = None
) -> Path | None:
    """Report that this instance takes itself out of service; unknown fields are read from ``reason``
    (:func:`describe_fault`) and from the instance this process reported. The file, or None."""
    folder = report_dir()
    if folder is None:
        return None
    sticky, named_device = describe_fault(reason)
    if device is None:
        device = host_gpu(named_device) if named_device is not None else _identity.get("device")
    else:
        device = host_gpu(device)
    report = FaultReport(
        instance=instance or _identity.get("instance") or _stub_model(),
        reason=reason,
        sticky_cuda=sticky if sticky_cuda is None else sticky_cuda,
        device=device,
        pid=os.getpid(),
    )
    return _write(folder / FAULTS / f"{os.getpid()}.json", asdict(report))


def _stub_model() -> str:
    """The model of this stub process (its first argument is ``<repository>/<model>/<version>/model.py``)."""
    try:
        argv = Path("/proc/self/cmdline").read_bytes().split(b"\0")
    except OSError:
        argv = []
    if len(argv) > 1 and argv[1].endswith(b"model.py"):
        return Path(argv[1].decode(errors="replace")).parent.parent.name
    return f"pid {os.getpid()}"


def _load(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        log.warning("unreadable report %s: %s", path, e)
        return None
    return data if isinstance(data, dict) else None


def read_instances(folder: Path) -> list[InstanceReport]:
    """The instance reports in ``folder`` (sorted by model, then instance)."""
    found = []
    for path in sorted((folder / INSTANCES).glob("*.json")):
        data = _load(path)
        if data is None:
            continue
        try:
            data["buckets"] = tuple(data.get("buckets") or ())
            found.append(InstanceReport(**data))
        except TypeError as e:
            log.warning("report %s does not have the fields of an instance report: %s", path, e)
    return sorted(found, key=lambda r: (r.model, r.instance))


def _mtime(path: Path) -> int:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return 0


def read_faults(folder: Path) -> list[FaultReport]:
    """The fault reports in ``folder`` (oldest first)."""
    found = []
    for path in sorted((folder / FAULTS).glob("*.json"), key=_mtime):
        data = _load(path)
        if data is None:
            continue
        try:
            found.append(FaultReport(**data))
        except TypeError as e:
            log.warning("report %s does not have the fields of a fault report: %s", path, e)
    return found
