"""Where one image's time goes at c=1: the client's round trip, Triton's statistics per model version and the
instances' own phases, put side by side (the ``latency`` phase measures; this module only computes and writes).

Sources, for one model served (``classify``, ``classify_fused``, ``prep_sink``):

* the client: N sequential gRPC requests of one image each, their round trips (p50);
* Triton's statistics API (``get_inference_statistics``) before and after those N requests, per model *version*:
  the difference of each cumulative counter, divided by the requests it counted. An ensemble's ``success`` is its
  whole request (its queue and compute counters add up its steps', so they are not used); each composing model's
  ``queue``, ``compute_input``, ``compute_infer`` and ``compute_output`` are its own, summed by Triton over all of
  its instances;
* the instances' own phases: the ``profile`` lines that :class:`tritonprep.triton.profiling.PhaseTimer` logs
  (``TRITONPREP_PROFILE=1``), ms per execute, weighted by each line's executes per second over every instance of a
  model; an instance's first line in the window is dropped (its interval began before the window).

Derived: client and gRPC = client p50 - the server's request time; ensemble scheduling = the ensemble's request
time - its steps' queue and compute; per Python-backend model, the hop between Triton and its stub (shared memory,
messages) = compute input + compute output + (compute infer - the instance's own execute phases).
Pure functions: no server.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import asdict, dataclass
from typing import Any

from .engines import clocks_text

#: Triton's per-request duration counters (``inference_stats``) a model's time is split into
PARTS = ("queue", "compute_input", "compute_infer", "compute_output")
#: profile phases that lie inside another phase (a step's own timings), not beside read, the steps and respond
NESTED = {"decode_gpu_s": "preprocess", "decode_s": "preprocess", "launch_s": "preprocess", "total_s": "preprocess",
          "turn_wait": "run", "network": "run", "top_k": "run", "read_tensor": "read", "read_array": "read",
          "respond_bytes": "respond", "respond_numeric": "respond"}  # fmt: skip
_PROFILE = re.compile(
    r"profile (?P<instance>\S+): (?P<exec>[\d.]+) exec/s (?P<req>[\d.]+) req/s (?P<img>[\d.]+) img/s, "
    r"batch (?P<batch>[\d.]+) img, per execute: (?P<phases>[^\"]*)"
)
_PHASE = re.compile(r"(\w+)=(-?[\d.]+)ms")
_INSTANCE_SUFFIX = re.compile(r"(_\d+)+$")


# ------------------------------------------------------------------------------------------- Triton's statistics
def stats_by_version(response: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    """``{(model, version): its model_stats entry}`` from a statistics answer (gRPC's ``as_json`` form, whose
    64-bit counters are strings, or HTTP's)."""
    return {(str(m.get("name", "")), str(m.get("version", ""))): m for m in response.get("model_stats", [])}


def _counter(entry: dict[str, Any], part: str) -> tuple[int, int]:
    """(count, ns) of one ``inference_stats`` counter; (0, 0) where absent (protobuf's JSON drops zeros)."""
    found = (entry.get("inference_stats") or {}).get(part) or {}
    return int(found.get("count", 0) or 0), int(found.get("ns", 0) or 0)


@dataclass
class ModelTimes:
    """One model version between two statistics snapshots: its requests and the mean ms per request."""

    name: str
    version: str
    requests: int
    executes: int
    request_ms: float
    queue_ms: float
    compute_input_ms: float
    compute_infer_ms: float
    compute_output_ms: float

    @property
    def label(self) -> str:
        """``preprocess v1``."""
        return f"{self.name} v{self.version}"

    @property
    def compute_ms(self) -> float:
        """Compute input + infer + output."""
        return self.compute_input_ms + self.compute_infer_ms + self.compute_output_ms


def model_times(before: dict[str, Any] | None, after: dict[str, Any], name: str, version: str) -> ModelTimes | None:
    """The difference of one model version's counters (``before``: its entry then, None if it had none), per
    request it succeeded; None if it succeeded no request in between."""
    before = before or {}
    count, ns = (a - b for a, b in zip(_counter(after, "success"), _counter(before, "success")))
    if count <= 0:
        return None
    per = {}
    for part in PARTS:
        per[part] = (_counter(after, part)[1] - _counter(before, part)[1]) / count / 1e6
    executes = int(after.get("execution_count", 0) or 0) - int(before.get("execution_count", 0) or 0)
    return ModelTimes(name, version, count, executes, ns / count / 1e6, per["queue"], per["compute_input"],
                      per["compute_infer"], per["compute_output"])  # fmt: skip


def composing_steps(config: dict[str, Any]) -> list[tuple[str, str]]:
    """An ensemble's steps as ``(model, version)`` (``"-1"``: the version policy's choice) from its model config
    (``get_model_config``'s answer or its ``config``); [] for a model that is not an ensemble."""
    config = config.get("config", config)
    steps = (config.get("ensemble_scheduling") or {}).get("step") or []
    return [(str(s.get("model_name", "")), str(s.get("model_version", "-1"))) for s in steps]


def resolve(
    steps: list[tuple[str, str]], before: dict[tuple[str, str], dict], after: dict[tuple[str, str], dict]
) -> list[ModelTimes]:
    """Each step's :class:`ModelTimes`: a step of version -1 (or none) is every version of its model that
    succeeded requests in between; a model named by two steps is counted once."""
    found: list[ModelTimes] = []
    for name, version in steps:
        keys = [k for k in after if k[0] == name and (version in ("-1", "", "0") or k[1] == version)]
        for key in sorted(keys):
            times = model_times(before.get(key), after[key], *key)
            if times is not None and all((t.name, t.version) != key for t in found):
                found.append(times)
    return found


# ------------------------------------------------------------------------------------------- instances' profiles
@dataclass
class ProfileLine:
    """One summary line of a model instance's :class:`~tritonprep.triton.profiling.PhaseTimer`."""

    instance: str
    executes_per_s: float
    requests_per_s: float
    phases_ms: dict[str, float]  # per execute

    @property
    def model(self) -> str:
        """The model of the instance: ``preprocess_0_3`` -> ``preprocess``."""
        return _INSTANCE_SUFFIX.sub("", self.instance) or self.instance


def parse_profile(lines: list[str]) -> list[ProfileLine]:
    """The profile lines among ``lines`` (a server log's, in order), parsed; other lines are skipped."""
    found = []
    for line in lines:
        m = _PROFILE.search(line)
        if m:
            phases = {k: float(v) for k, v in _PHASE.findall(m.group("phases"))}
            found.append(ProfileLine(m.group("instance"), float(m.group("exec")), float(m.group("req")), phases))
    return found


def profile_per_request(lines: list[str]) -> dict[str, dict[str, Any]]:
    """Per model: ms per request of each phase over every instance of the model (the lines' per-execute ms times
    their executes per second, summed, over their requests per second, summed: their intervals are about equal),
    from the lines after each instance's first (whose interval began before the window); ``lines`` and
    ``instances`` say what it rests on."""
    seen: set[str] = set()
    kept: dict[str, list[ProfileLine]] = {}
    for p in parse_profile(lines):
        if p.instance not in seen:
            seen.add(p.instance)
            continue
        if p.executes_per_s > 0 and p.requests_per_s > 0:
            kept.setdefault(p.model, []).append(p)
    models = {}
    for model, found in kept.items():
        executes, requests = sum(p.executes_per_s for p in found), sum(p.requests_per_s for p in found)
        names = sorted({k for p in found for k in p.phases_ms})
        phases = {k: sum(p.phases_ms.get(k, 0.0) * p.executes_per_s for p in found) / requests for k in names}
        models[model] = {"phases_ms": phases, "lines": len(found), "instances": len({p.instance for p in found}),
                         "requests_per_execute": requests / executes}  # fmt: skip
    return models


def execute_ms(phases: dict[str, float]) -> float:
    """An execute's own time: read, each step and respond (the phases nested in a step are not added again)."""
    return sum(v for k, v in phases.items() if k not in NESTED)


#: the preprocess step's time after decoding (classify_fused leaves the wait for the GPU to the network)
KERNELS_LABEL = "resize, crop, normalize kernels; the wait for the GPU unless the network follows (total_s - decode_s)"
#: the GPU executor's kernels launched (their arguments' upload included), then its wait for its stream
LAUNCH_LABEL = "the kernels launched (launch_s - decode_s)"
WAIT_LABEL = "the wait for the decode's and the kernels' GPU work, where the instance waits (total_s - launch_s)"
#: the runtime's time until it hands over the logits (on a GPU: enqueued, not yet computed)
NETWORK_LABEL = "the network, enqueued (its runtime)"
#: top-k behind the network on its stream: the kernel, the copies to the host and the wait for both
TOP_K_LABEL = "top-k and the copy to the host, waiting for the network's GPU work"


#: the parts of a step or phase the instances time apart (``run``'s, the classifier's ``read`` and ``respond``'s), in
#: the order the table lists them
PART_LABELS = {
    "turn_wait": "waiting for a turn at the GPU",
    "network": NETWORK_LABEL,
    "top_k": TOP_K_LABEL,
    "read_tensor": "the backend's input tensor (pb_utils.get_input_tensor_by_name)",
    "read_array": "its array through DLPack (numpy or CuPy from_dlpack)",
    "respond_bytes": "the BYTES outputs (LABELS: pb_utils.Tensor of an object array)",
    "respond_numeric": "the numeric outputs (SCORES, CLASS_IDS, logits)",
}
#: what "the rest" of a phase holds, where it is not a step's checks and batching
REST = {"read": "the outputs asked for, the first call's log line", "respond": "grouping the outputs"}


def inner_rows(step: str, phases: dict[str, float]) -> list[tuple[str, float, int]]:
    """What a step's nested phases say, as (label, ms, depth below the step): the decode, the kernels and the rest
    of ``preprocess``; the turn, the network, top-k and the rest of ``run``; the tensor, the array and the rest of the
    classifier's ``read``, the BYTES and numeric outputs and the rest of its ``respond``; [] for a step without
    nested phases."""
    nested = {k: v for k, v in phases.items() if NESTED.get(k) == step}
    if not nested or step not in phases:
        return []
    rows = []
    if "decode_s" in nested:
        rows.append(("decode (nvImageCodec; a CPU fallback included)", nested["decode_s"], 1))
        fallback = nested["decode_s"] - nested.get("decode_gpu_s", nested["decode_s"])
        if fallback >= 0.005:
            rows.append(("of which the CPU fallback (decode_s - decode_gpu_s)", fallback, 2))
        if "total_s" in nested:
            rows.append((KERNELS_LABEL,
                         nested["total_s"] - nested["decode_s"], 1))  # fmt: skip
            if "launch_s" in nested:
                rows.append((LAUNCH_LABEL, nested["launch_s"] - nested["decode_s"], 2))
                rows.append((WAIT_LABEL, nested["total_s"] - nested["launch_s"], 2))
    rows += [(label, nested[k], 1) for k, label in PART_LABELS.items() if k in nested]
    covered = nested.get("total_s", sum(nested.get(k, 0.0) for k in PART_LABELS))
    rest = REST.get(step, "checks, batching, splitting rows")
    rows.append((f"the rest of {step} ({rest})", phases[step] - covered, 1))
    return rows


#: how the table names an execute's top-level phases (a step: by its name)
PHASE_LABELS = {"read": "read: the requests' inputs", "respond": "respond: the output tensors"}


# ------------------------------------------------------------------------------------------- the breakdown
def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values``, nearest rank; 0.0 for none."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def breakdown(
    model: str,
    client_ms: list[float],
    request: ModelTimes,
    composing: list[ModelTimes],
    profiles: dict[str, dict[str, Any]],
    perf_analyzer_p50_ms: float | None = None,
) -> dict[str, Any]:
    """One model's breakdown at c=1: ``rows`` of ``(label, ms, level)`` and the figures they come from.

    ``request``: the model's own statistics (an ensemble's: its whole request); ``composing``: its steps' ([] for a
    model that is not an ensemble: the model is then its own step); ``profiles``: :func:`profile_per_request`.
    Each step's times are per request of ``model`` (a step called twice per request counts twice)."""
    p50 = statistics.median(client_ms) if client_ms else 0.0
    steps = composing or [request]
    rows: list[tuple[str, float, int]] = [
        (f"client round trip, p50 of {len(client_ms)} (gRPC, 1 image, Python tritonclient)", p50, 0),
        ("client and gRPC (client p50 - server request time)", p50 - request.request_ms, 1),
        (f"server: {model} request (Triton statistics, mean)", request.request_ms, 1),
    ]
    per_step = []
    for step in steps:
        share = step.requests / request.requests if request.requests else 1.0
        per_step.append((step, share))
    inside = sum((s.queue_ms + s.compute_ms) * share for s, share in per_step)
    if composing:
        rows.append(("ensemble scheduling and handoffs (request - its steps' queue and compute)",
                     request.request_ms - inside, 2))  # fmt: skip
    else:
        rows.append(("Triton's request handling (request - queue - compute)", request.request_ms - inside, 2))
    for step, share in per_step:
        rows.append((f"{step.label}: queue", step.queue_ms * share, 2))
        profile = profiles.get(step.name)
        if not profile:
            rows.append((f"{step.label}: compute (input + infer + output; no instance profile)",
                         step.compute_ms * share, 2))  # fmt: skip
            continue
        phases = profile["phases_ms"]
        own = execute_ms(phases)
        hop = step.compute_input_ms + step.compute_output_ms + step.compute_infer_ms - own
        rows.append((f"{step.label}: Python-backend hop (compute input + output + infer - execute)", hop * share, 2))
        rows.append((f"{step.label}: execute (the instances' own phases)", own * share, 2))
        for phase, ms in sorted(phases.items(), key=lambda kv: (kv[0] != "read", kv[0] == "respond", kv[0])):
            if phase in NESTED:
                continue
            rows.append((PHASE_LABELS.get(phase, f"step {phase}"), ms * share, 3))
            rows += [(label, inner * share, 3 + depth) for label, inner, depth in inner_rows(phase, phases)]
    return {
        "model": model,
        "rows": rows,
        "client": {
            "requests": len(client_ms),
            "p50_ms": p50,
            "p90_ms": percentile(client_ms, 0.9),
            "p99_ms": percentile(client_ms, 0.99),
            "mean_ms": statistics.fmean(client_ms) if client_ms else 0.0,
        },  # fmt: skip
        "perf_analyzer_p50_ms": perf_analyzer_p50_ms,
        "request": asdict(request),
        "composing": [asdict(s) for s in composing],
        "profiles": {s.name: profiles[s.name] for s in steps if s.name in profiles},
    }


def breakdown_table(entry: dict[str, Any]) -> list[str]:
    """One model's table "where one image's time goes at c=1": ms and % of the client's p50, then the raw
    statistics of each step."""
    rows = entry.get("rows") or []
    if not rows:
        return []
    p50 = rows[0][1] or 1.0
    lines = ["| step | ms | % of client p50 |", "|---|---:|---:|"]
    for label, ms, level in rows:
        indent = "&nbsp;&nbsp;" * level
        lines.append(f"| {indent}{label} | {ms:.3f} | {100 * ms / p50:.1f} % |")
    notes = []
    pa = entry.get("perf_analyzer_p50_ms")
    client = entry.get("client", {})
    if pa:
        notes.append(f"perf_analyzer (C++ client) at c=1: p50 {pa:.2f} ms")
    if client:
        notes.append(f"this client: p90 {client.get('p90_ms', 0):.2f}, p99 {client.get('p99_ms', 0):.2f}, mean "
                     f"{client.get('mean_ms', 0):.2f} ms")  # fmt: skip
    clocks = clocks_text(entry.get("clocks") or {})
    if clocks:
        notes.append(f"while the timed requests ran: {clocks}")
    request, composing = entry.get("request"), entry.get("composing") or []
    if request and composing:
        notes.append(
            f"{request['name']} v{request['version']}: {request['requests']} requests, request "
            f"{request['request_ms']:.3f} ms (an ensemble: its queue and compute are its steps')"
        )
    for s in composing or ([request] if request else []):
        profile = (entry.get("profiles") or {}).get(s["name"])
        seen = (f"; {profile['instances']} instance(s), {profile['lines']} profile line(s)" if profile
                else "; no profile lines")  # fmt: skip
        notes.append(f"{s['name']} v{s['version']}: {s['requests']} requests, {s['executes']} executes, request "
                     f"{s['request_ms']:.3f} ms = queue {s['queue_ms']:.3f} + compute input "
                     f"{s['compute_input_ms']:.3f} / infer {s['compute_infer_ms']:.3f} / output "
                     f"{s['compute_output_ms']:.3f} ms (+ Triton's own){seen}")  # fmt: skip
    return lines + [""] + [f"- {n}" for n in notes]


def breakdown_section(summary: dict[str, Any]) -> list[str]:
    """The report's section: one table per setting and model the ``latency`` phase measured (none without)."""
    found = summary.get("latency") or {}
    if not found:
        return []
    lines = [
        "",
        "## Where one image's time goes at c=1",
        "",
        "The `latency` phase: N gRPC requests of one 500x375 JPEG, one after the other; Triton's statistics "
        "per model version before and after them; the instances' own phases from their profile lines "
        "(TRITONPREP_PROFILE=1). The hop is what the Python backend adds around an execute (shared memory, "
        "messages to and from the stub): compute input + output + (compute infer - the execute's own phases).",
    ]
    for label, models in found.items():
        for model, entry in models.items():
            lines += ["", f"### `{model}` ({label})", "", *breakdown_table(entry)]
    return lines
