"""The start-up summary: one block that ``tritonprep serve`` logs when the server is ready.

Each GPU (name, memory; on a multi-GPU host also its server's pid and metrics port), whether CUDA MPS is
on, what the GPU memory budget chose, what the admission admits (:mod:`.admission`: the CUDA pool, the
images it holds between steps, the queue limits), and per model its kind, instance count (per GPU), runtime, batch
buckets and GPU memory, then the time to ready. It reads what the server serves (the model-config API,
with the admin header), the instances' reports (:mod:`tritonprep.reports`: the runtime each instance
loaded; "-" where an instance wrote none) and ``nvidia-smi`` where present (the GPU memory each
instance's process holds: the reports' pids, else the model's stub processes).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from .. import reports
from .host import Host
from .install import gpu_info, smi_query, visible_gpus
from .process import EmbeddedServer
from .supervise import stub_processes

_HEAD = ("model", "kind", "instances", "runtime", "buckets", "GPU memory")


def process_gpu_memory() -> dict[int, int]:
    """MiB of GPU memory each process holds, from nvidia-smi ({} without it)."""
    out = smi_query("--query-compute-apps=pid,used_memory")
    if out is None:
        return {}
    found: dict[int, int] = defaultdict(int)
    for line in out.splitlines():
        pid, _, mb = (f.strip() for f in line.partition(","))
        if pid.isdigit() and mb.isdigit():
            found[int(pid)] += int(mb)
    return dict(found)


def _parameter(config: dict[str, Any], *names: str) -> str:
    params = config.get("parameters") or {}
    for name in names:
        value = (params.get(name) or {}).get("string_value")
        if value:
            return str(value)
    return ""


def _instances(config: dict[str, Any]) -> tuple[str, str]:
    """(kinds, instance count) of a served config's instance groups."""
    groups = config.get("instance_group") or []
    kinds = sorted({str(g.get("kind", "")).removeprefix("KIND_") for g in groups}) or ["?"]
    count = sum(int(g.get("count", 1)) * max(1, len(g.get("gpus") or [])) for g in groups)
    return "/".join(kinds), str(count or "?")


def _gpu_memory(config: dict[str, Any], pids: Sequence[int], memory: dict[int, int]) -> str:
    """The GPU memory the model's processes hold (nvidia-smi), and the budget of each instance."""
    held = [memory[pid] for pid in pids if pid in memory]
    declared = _parameter(config, "gpu_memory_mb")
    return (f"{sum(held)} MiB" if held else "-") + (f" (budget {declared} MiB each)" if declared else "")


def model_row(
    name: str,
    config: dict[str, Any] | None,
    instances: list[reports.InstanceReport],
    memory: dict[int, int],
    stubs: Sequence[int] = (),
) -> tuple[str, ...]:
    """One model's line of the table (the reports' pids, else the model's stub processes, for its memory)."""
    if config is None:
        return (name, "?", "?", "-", "-", "-")
    if config.get("platform") == "ensemble":
        return (name, "ensemble", "-", "-", "-", "-")
    runtimes = ",".join(sorted({r.runtime for r in instances if r.runtime})) or "-"
    buckets = _parameter(config, "batch_buckets", "network.batch_buckets")
    if not buckets and instances and instances[0].buckets:
        buckets = ",".join(map(str, instances[0].buckets))
    gpu = _gpu_memory(config, [r.pid for r in instances] or list(stubs), memory)
    return (name, *_instances(config), runtimes, buckets or "-", gpu)


def _table(rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(_HEAD))]
    return ["  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]


def _models(server: EmbeddedServer) -> list[str]:
    """The model table of one server: per model its kind, instances, runtime, buckets and GPU memory."""
    folder = server.report_dir
    by_model: dict[str, list[reports.InstanceReport]] = defaultdict(list)
    for report in reports.read_instances(folder) if folder is not None else []:
        by_model[report.model].append(report)
    memory = process_gpu_memory()
    stubs: dict[str, list[int]] = defaultdict(list)
    for stub in stub_processes(server.pid) if server.pid is not None else []:
        stubs[stub.model].append(stub.pid)
    rows = [_HEAD]
    for name in sorted(server.model_states()):
        rows.append(model_row(name, server.model_config(name), by_model.get(name, []), memory, stubs.get(name, [])))
    return _table(rows)


def _budget(server: EmbeddedServer) -> str:
    if server.plan is not None:
        return f"  {server.plan.describe()}"
    budget = server.options.gpu_memory_budget
    return f"  GPU memory budget: {'off' if budget == 'off' else 'not applied (no GPU)'}"


def _admission(server: EmbeddedServer) -> str:
    if server.admission is not None:
        return f"  {server.admission.describe()}"
    return "  admission: queues as configured (no GPU: no CUDA pool between steps)"


def summary(target: EmbeddedServer | Host) -> str:
    """The summary block of a ready server, or of a ready host's servers (several lines)."""
    if isinstance(target, Host) and target.shared:
        return _host_summary(target)
    server = target.parts[0].server if isinstance(target, Host) else target
    ready_s = target.ready_s
    ready = f" in {ready_s:.1f} s" if ready_s is not None else ""
    lines = [f"server ready{ready}:"]
    gpus = gpu_info(visible_gpus(server.options.gpus))
    for g in gpus:
        lines.append(f"  GPU {g.index}: {g.name}, {g.total_mb} MiB ({g.used_mb} MiB in use)")
    if not gpus:
        lines.append("  GPUs: none (every instance runs on the CPU)")
    mps = server.mps
    lines.append(f"  CUDA MPS: {'on (' if mps and mps.enabled else 'off ('}{mps.detail if mps else 'unknown'})")
    lines.append(_budget(server))
    lines.append(_admission(server))
    return "\n".join(lines + _models(server))


def _host_summary(host: Host) -> str:
    """Several servers: the host's layout, then per GPU its server, then the first server's models (every GPU's
    server serves the same repository)."""
    ready = f" in {host.ready_s:.1f} s" if host.ready_s is not None else ""
    lines = [f"server ready{ready}: {host.topology.describe()}"]
    devices = gpu_info(visible_gpus(host.options.gpus))
    for state, part in zip(host.gpu_states(), host.parts):
        server = part.server
        entry = part.slot.devices[0] if part.slot.devices else None  # an index or a UUID (CUDA_VISIBLE_DEVICES)
        device = next((g for g in devices if entry and (g.index == entry or g.uuid.startswith(entry))), None)
        name = f"{device.name}, {device.total_mb} MiB ({device.used_mb} MiB in use)" if device else "CPU server"
        mps = server.mps
        mps_text = f"CUDA MPS {'on' if mps and mps.enabled else 'off'}" + (
            f" ({mps.detail})" if mps and not mps.enabled else ""
        )
        lines.append(
            f"  GPU {part.gpu}: {name}; tritonserver pid {server.pid}, {mps_text}, metrics {state.metrics_url}"
        )
    o = host.options
    lines.append(
        f"  host endpoint http://{o.host}:{o.metrics_port}: /metrics (every GPU's), /v2/health/ready, "
        "/v2/health/live, /tritonprep/gpus"
    )
    lines.append(_budget(host.parts[0].server) + (" (each GPU)" if host.parts[0].server.plan else ""))
    lines.append(_admission(host.parts[0].server))
    lines.append(f"  models of each GPU's server (GPU {host.parts[0].gpu}'s shown):")
    return "\n".join(lines + _models(host.parts[0].server))
