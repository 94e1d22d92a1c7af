"""Servers the harness starts, each measured: launch to ready, the instances' start-up reports, GPU memory
(total and per process, at ready and at peak, sampled throughout), the stop time, tritonserver's exit code
and whether the watchdog had to kill anything.

:func:`serve` starts a repository through the launcher (``Host``; on a machine with several GPUs, GPU 0 alone
unless the phase names its GPUs, as the ``gpus`` phase does) with a :class:`~.settings.Setting` (MPS, GPU memory
budget) and appends one record per server to ``summary["servers"]``.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tritonprep.classifier.late_buckets import ANNOUNCED, MADE
from tritonprep_testkit.servers import local_options

from .gpu import GpuSampler, read_gpu
from .settings import Setting

log = logging.getLogger("harness")
#: the variable the launcher sets for tritonserver and its stubs (instance reports, tritonprep.reports)
REPORT_DIR_ENV = "TRITONPREP_REPORT_DIR"
#: what the harness's servers change from the launcher's defaults (Triton's exit timeout stays its 30 s: a GPU
#: repository with 4 instances of a model needed 13 s to unload on the H100, so 10 s cut its stop short)
#: capacity is measured without the front queue's timeout (the overload phase serves the launcher's own options)
BENCH_OPTIONS: dict[str, Any] = {"cuda_memory_pool_mb": 2048, "queue_timeout_ms": 0}
_KILLED = re.compile(r"killed (\d+) leftover process")
_FORCED = "SIGKILL to its process group"
_MPS_END = re.compile(r"CUDA MPS: control daemon pid \S+ (quit|killed)")
_MPS_WITHOUT = re.compile(r"serving without CUDA MPS: (.*)")


@dataclass
class Served:
    """A ready server, the setting it runs with and the record being filled for it."""

    server: Any  # tritonprep.launcher.host.Host
    setting: Setting
    tag: str
    record: dict[str, Any]
    log_path: Path
    log_offset: int = 0  # where this server's lines begin in its log (a log of an earlier run is appended to)

    def log_lines(self, needle: str, first: int = 6) -> list[str]:
        """The first lines of this server's log that contain ``needle``."""
        return log_lines(self.log_path, needle, first, self.log_offset)

    @property
    def urls(self) -> dict[str, str]:
        """perf_analyzer's URL per protocol."""
        o = self.server.options
        return {"grpc": o.grpc_url, "http": f"{o.host}:{o.http_port}"}

    @property
    def stats_url(self) -> str:
        """Where Triton's statistics API answers for every server (a host of several: its endpoint)."""
        o = self.server.options
        return f"{o.host}:{o.metrics_port}" if getattr(self.server, "shared", False) else f"{o.host}:{o.http_port}"

    @property
    def admin_key(self) -> str:
        """The value of the admin header (statistics and model-config APIs, which perf_analyzer reads)."""
        return self.server.admin_key

    @property
    def metrics_url(self) -> str:
        """Triton's Prometheus endpoint."""
        o = self.server.options
        return f"http://{o.host}:{o.metrics_port}/metrics"


def watchdog_outcome(log_text: str) -> dict[str, Any]:
    """What the watchdog's lines in a server log say: the leftover processes it killed, whether tritonserver
    itself had to be SIGKILLed, and how CUDA MPS went (``quit``/``killed``: the daemon ran and quit when asked or
    had to be killed; ``not used: <why>``; ``""``: no MPS line)."""
    ended = _MPS_END.findall(log_text)
    without = _MPS_WITHOUT.findall(log_text)
    mps = ended[-1] if ended else f"not used: {without[-1]}" if without else ""
    return {"killed_leftovers": sum(int(n) for n in _KILLED.findall(log_text)), "forced_kill": _FORCED in log_text,
            "mps": mps}  # fmt: skip


def report_dir(server: Any) -> Path | None:
    """The folder of the running server's instance reports: the launcher's ``report_dir`` if it names one, else
    ``TRITONPREP_REPORT_DIR`` in tritonserver's environment; None when neither (a launcher without reports)."""
    named = getattr(server, "report_dir", None)
    if named:
        return Path(named)
    if server.pid is None:
        return None
    try:
        environ = Path(f"/proc/{server.pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    for entry in environ:
        key, _, value = entry.partition(b"=")
        if key.decode(errors="replace") == REPORT_DIR_ENV and value:
            return Path(value.decode(errors="replace"))
    return None


def read_reports(folder: Path | None, kind: str = "instances") -> list[dict[str, Any]]:
    """The JSON reports in ``folder/<kind>/`` (``instances`` or ``faults``), oldest first; unreadable ones are
    skipped with a warning (an instance may be writing one)."""
    if folder is None or not (folder / kind).is_dir():
        return []
    reports = []
    for path in sorted((folder / kind).glob("*.json"), key=lambda p: (p.stat().st_mtime, p.name)):
        try:
            reports.append(json.loads(path.read_text()))
        except (OSError, ValueError) as e:
            log.warning("unreadable report %s: %s", path, e)
    return reports


def startup_breakdown(instances: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per model: its instances, their kinds, and the slowest instance's time in each start-up phase (s)."""
    models: dict[str, dict[str, Any]] = {}
    for rep in instances:
        entry = models.setdefault(rep.get("model", "?"), {"instances": 0, "kinds": [], "slowest_s": {}, "gpu_mb": 0})
        entry["instances"] += 1
        kind = f"{rep.get('kind', '?')}:{rep.get('device', '?')}"
        if kind not in entry["kinds"]:
            entry["kinds"].append(kind)
        entry["gpu_mb"] += int(rep.get("gpu_memory_mb") or 0)
        for phase, seconds in (rep.get("timings") or {}).items():
            entry["slowest_s"][phase] = round(max(float(seconds), entry["slowest_s"].get(phase, 0.0)), 3)
    return models


def instances_summary(instances: list[dict[str, Any]]) -> str:
    """``classifier x2 (b<=64), preprocess x4``: the instances each model reported and the largest network batch
    bucket they loaded (what a GPU memory budget may cut); "" without reports."""
    models: dict[str, list[dict[str, Any]]] = {}
    for rep in instances:
        models.setdefault(rep.get("model", "?"), []).append(rep)
    parts = []
    for model, reps in sorted(models.items()):
        largest = max((max(r.get("buckets") or [0]) for r in reps), default=0)
        parts.append(f"{model} x{len(reps)}" + (f" (b<={largest})" if largest else ""))
    return ", ".join(parts)


def profile_lines(log_path: Path, last: int = 12, offset: int = 0) -> list[str]:
    """The per-execute phase timings the instances logged (TRITONPREP_PROFILE=1), newest last."""
    text = _log_text(log_path, offset)
    return [ln.split('"')[1] if '"' in ln else ln for ln in text.splitlines() if "profile " in ln][-last:]


def log_lines(log_path: Path, needle: str, first: int = 6, offset: int = 0) -> list[str]:
    """The first lines of the server log that contain ``needle``."""
    return [ln for ln in _log_text(log_path, offset).splitlines() if needle in ln][:first]


def _log_text(log_path: Path, offset: int = 0) -> str:
    if not log_path.is_file():
        return ""
    with open(log_path, "rb") as f:
        f.seek(offset)
        return f.read().decode(errors="replace")


@contextmanager
def serve(
    out: Path,
    servers: list[dict[str, Any]],
    tag: str,
    repo: Path,
    setting: Setting,
    *,
    env: dict[str, str] | None = None,
    period: float = 2.0,
    options: dict[str, Any] | None = None,
) -> Iterator[Served]:
    """Start ``repo`` with ``setting`` (and ``env`` for tritonserver and its stubs), wait until ready, yield it,
    stop it; the record (appended to ``servers``, also if it never became ready) says how each step went.

    ``options``: ``ServerOptions`` fields; None: the harness's (:data:`BENCH_OPTIONS`), ``{}``: the launcher's.
    Raises ``tritonprep.errors.ServerError`` if it does not become ready.
    """
    from tritonprep.launcher.host import Host
    from tritonprep.launcher.install import gpu_count

    name = f"{tag}{setting.suffix}"
    log_path = out / f"triton-{name}.log"
    offset = log_path.stat().st_size if log_path.is_file() else 0
    fields = {**(BENCH_OPTIONS if options is None else options), **setting.server_options()}
    if "gpus" not in fields and gpu_count() > 1:  # a one-GPU figure on a multi-GPU machine (the gpus phase: all)
        fields["gpus"] = (0,)
    if env:
        fields["env"] = tuple(env.items())
    server = Host(local_options(repo, **fields), log_path)  # a server per GPU of ``options["gpus"]`` (default: all)
    record: dict[str, Any] = {"tag": tag, "setting": setting.label, "name": name, "repository": str(repo),
                              "log": log_path.name, "env": env or {}}  # fmt: skip
    before = read_gpu()
    record["baseline_mib"] = before.total_mib if before else -1
    sampler = GpuSampler(period, f"http://{server.options.host}:{server.options.metrics_port}/metrics")
    served = Served(server, setting, tag, record, log_path, offset)
    try:
        with sampler:
            t0 = time.monotonic()
            try:
                server.start()
                server.wait_ready()
            except BaseException as e:  # not ready (ServerError), or interrupted: nothing may stay behind
                record["error"] = (str(e).splitlines() or [type(e).__name__])[0]
                record["exit_code"] = server.stop()
                raise
            record["ready_s"] = round(time.monotonic() - t0, 2)
            at_ready = sampler.take()
            record["late_buckets_s"] = wait_for_late_buckets(log_path, offset)  # measured with them in use
            record["ready_mib"] = at_ready.total_mib if at_ready else -1
            record["by_process_ready"] = at_ready.by_process if at_ready else {}
            folders = [report_dir(part) for part in server.servers]
            record["instances"] = [r for f in folders for r in read_reports(f)]
            record["gpus"], record["tritonservers"] = server.topology.gpu_count, server.topology.count
            log.info("%s (%s) ready in %.1f s, GPU memory %s MiB", tag, setting.label, record["ready_s"],
                     record["ready_mib"])  # fmt: skip
            try:
                yield served
            finally:
                record["faults"] = [r for f in folders for r in read_reports(f, "faults")]
                record["instances"] = [r for f in folders for r in read_reports(f)] or record["instances"]
                t1 = time.monotonic()
                record["exit_code"] = server.stop()
                record["stop_s"] = round(time.monotonic() - t1, 2)
                log.info("%s (%s) stopped in %.1f s, exit code %s", tag, setting.label, record["stop_s"],
                         record["exit_code"])  # fmt: skip
    finally:
        record["peak_mib"] = sampler.peak_mib
        record["by_process_peak"] = sampler.peak_by_process
        record["samples"] = sampler.samples
        record["cupy_pool_bytes"] = sampler.pools
        record.update(watchdog_outcome(_log_text(log_path, offset)))
        record["profile"] = profile_lines(log_path, offset=offset)
        servers.append(record)


def server_mib(record: dict[str, Any], key: str) -> int | None:
    """MiB the server held (``key``: ready_mib or peak_mib) over the GPUs' baseline before it started; None when
    not sampled."""
    value, base = record.get(key, -1), record.get("baseline_mib", -1)
    return None if value is None or value < 0 or base < 0 else value - base


#: a network instance's start line where it has late buckets, and its thread's line once it made them
#: (tritonprep.classifier.late_buckets)
_LATE_ANNOUNCED = re.compile(r"late buckets [\d,]+ " + re.escape(ANNOUNCED))
#: how long a benchmark waits for the late buckets after ready, seconds
LATE_WAIT_S = 60.0


def late_buckets_pending(text: str) -> int:
    """How many network instances of a server log (``text``) announced late buckets and have not logged their thread
    done yet (made, or none made)."""
    return max(0, len(_LATE_ANNOUNCED.findall(text)) - text.count(MADE))


def wait_for_late_buckets(log_path: Path, offset: int, timeout_s: float = LATE_WAIT_S) -> float | None:
    """Wait until every network instance of the server logging to ``log_path`` (from ``offset``) has made its late
    buckets, which the next call then uses: a measurement after this sees the steady state, not the start's buckets.
    The seconds waited, or None if some were still being made after ``timeout_s`` (logged)."""
    t0 = time.monotonic()
    while True:
        pending = late_buckets_pending(_log_text(log_path, offset))
        if not pending:
            return round(time.monotonic() - t0, 2)
        if time.monotonic() - t0 > timeout_s:
            log.warning("%d network instance(s) still making late buckets %.0f s after ready", pending, timeout_s)
            return None
        time.sleep(0.2)
