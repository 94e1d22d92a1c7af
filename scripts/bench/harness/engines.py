"""How busy the GPU's parts are under load: the SMs, memory, the JPEG and video decode engines, sampled every
second by ``nvidia-smi dmon`` while a throughput point runs; and where the GPU's time goes per kernel (CUPTI, the
``kernels`` rows of :mod:`scripts.bench.gpu_time`). The report's sections for both.

``nvidia-smi dmon -s u`` prints ``sm mem enc dec`` and, on recent drivers, ``jpg ofa`` (NVML's JPEG and optical
flow engine utilization); ``--gpm-metrics`` adds, on Hopper and later, GPU Performance Metrics: 2 SM activity
(``smutil``), 3 SM occupancy (``smocc``), 40-46 each NVJPG engine's activity (``nvjpg0``...). Seen on an H100 with
driver 580.159.04: all of these, GPM's first two samples of a call ``-``; under a JPEG decode load (torchvision's
nvJPEG, batches of 64) jpg 68 %, nvjpg 66/0/59/59/59/59/59 %, sm 36 %, smutil 12 %. Each sampling call runs
``dmon -c`` for a few seconds; a call that fails or prints no sample is tried again with fewer metrics: first
without the per-engine ones, then without GPM, then ``--query-gpu`` (sm and mem only). The parser reads the
columns from dmon's header, so columns a driver lacks are simply absent, and ``-`` (not available) is skipped.
Without ``nvidia-smi`` there are no samples, never an error.

Beside it, :class:`ClockSampler` reads the SM clock and the power draw twice a second
(``--query-gpu=index,clocks.sm,clocks.max.sm,power.draw``): a GPU that idles between requests may run them below
its top clock, which an image's time at c=1 would show, and a throughput point would not.
"""

from __future__ import annotations

import re
import subprocess
import threading
from typing import Any

#: the GPM metrics asked for: SM activity, SM occupancy, then NVJPG 0-6 (an H100's seven JPEG engines)
GPM_METRICS = "2,3," + ",".join(str(i) for i in range(40, 47))
#: the sampling calls, best first (``-c``: samples per call; GPM's first two samples of a call are ``-``)
DMON_CALLS = [
    ["dmon", "-s", "u", "-d", "1", "-c", "6", "--gpm-metrics", GPM_METRICS],
    ["dmon", "-s", "u", "-d", "1", "-c", "6", "--gpm-metrics", "2,3"],
    ["dmon", "-s", "u", "-d", "1", "-c", "6"],
]
QUERY_CALL = ["--query-gpu=index,utilization.gpu,utilization.memory", "--format=csv,noheader,nounits"]
CLOCKS_CALL = ["--query-gpu=index,clocks.sm,clocks.max.sm,power.draw", "--format=csv,noheader,nounits"]
#: the fields of :data:`CLOCKS_CALL` after the index, by the names a sample gives them
CLOCK_FIELDS = ("sm_mhz", "max_sm_mhz", "power_w")
#: seconds between two clock readings (each is an nvidia-smi process: few, not to disturb what is measured)
CLOCK_PERIOD_S = 0.5
#: the report's fixed columns, in order (dmon's names); any other column sampled follows them
MAIN_COLUMNS = ("sm", "mem", "jpg", "dec")
#: columns not worth a place in the report (always 0 for this work, or not utilization)
IGNORED = {"gpu", "enc", "ofa", "idx", "date", "time"}
_ENGINE = re.compile(r"^(nvjpg|nvdec)(\d+)$")


#: GPM metric ids by the names dmon gives them (driver 580 heads a call's columns ``smutil``, ``smocc``,
#: ``nvjpg0``..., or at times ``id=2``, ``id=3``, ``id=40``...: both are read as the names)
GPM_NAMES = {1: "gract", 2: "smutil", 3: "smocc", 4: "intact", 5: "tensoract", 10: "dramact",
             **{30 + i: f"nvdec{i}" for i in range(8)}, **{40 + i: f"nvjpg{i}" for i in range(8)}}  # fmt: skip


def column_name(raw: str) -> str:
    """A dmon column's name, lowercase; ``id=N`` (a GPM metric by its id) as :data:`GPM_NAMES` names it."""
    name = raw.lower()
    if name.startswith("id=") and name[3:].isdigit():
        return GPM_NAMES.get(int(name[3:]), name)
    return name


def parse_dmon(text: str) -> list[dict[str, Any]]:
    """The samples of ``nvidia-smi dmon`` output: one dict per data line, keyed by the header's column names
    (:func:`column_name`), ``gpu`` the index as a string, every other value a float; ``-`` and other non-numbers
    dropped.
    A header printed again (dmon repeats it) replaces the names; lines before a header, or whose field count
    differs from it, are skipped."""
    names: list[str] = []
    samples = []
    for line in text.splitlines():
        fields = line.replace("#", " # ", 1).split() if line.lstrip().startswith("#") else line.split()
        if not fields:
            continue
        if fields[0] == "#":
            header = [column_name(f) for f in fields[1:]]
            if "gpu" in header:
                names = header
            continue  # the units line
        if not names or len(fields) != len(names):
            continue
        sample: dict[str, Any] = {}
        for name, value in zip(names, fields):
            if name == "gpu":
                sample["gpu"] = value
                continue
            try:
                sample[name] = float(value)
            except ValueError:
                pass
        if "gpu" in sample:
            samples.append(sample)
    return samples


def parse_csv(text: str, fields: tuple[str, ...]) -> list[dict[str, Any]]:
    """The samples of a ``--query-gpu=index,...`` call (csv, no header, no units): ``{"gpu", <field>: value, ...}``
    per line, a field nvidia-smi cannot read (``[N/A]``) left out."""
    samples = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 1 + len(fields) or not parts[0].isdigit():
            continue
        sample: dict[str, Any] = {"gpu": parts[0]}
        for name, value in zip(fields, parts[1:]):
            try:
                sample[name] = float(value)
            except ValueError:
                pass
        samples.append(sample)
    return samples


def parse_query(text: str) -> list[dict[str, Any]]:
    """The samples of :data:`QUERY_CALL` (``utilization.gpu,utilization.memory``) in dmon's names (``sm``, ``mem``)."""
    return parse_csv(text, ("sm", "mem"))


def parse_clocks(text: str) -> list[dict[str, Any]]:
    """The samples of :data:`CLOCKS_CALL`: ``{"gpu", "sm_mhz", "max_sm_mhz", "power_w"}``."""
    return parse_csv(text, CLOCK_FIELDS)


def means(samples: list[dict[str, Any]], trim: int = 1) -> dict[str, dict[str, float]]:
    """Per GPU: the mean of each column over its samples (``samples``: the count), the first and last ``trim``
    samples of each GPU left out where more than ``2 * trim`` remain (the load starting and stopping)."""
    by_gpu: dict[str, list[dict[str, Any]]] = {}
    for s in samples:
        by_gpu.setdefault(str(s["gpu"]), []).append(s)
    found = {}
    for gpu, mine in by_gpu.items():
        if trim and len(mine) > 2 * trim:
            mine = mine[trim:-trim]
        columns = sorted({k for s in mine for k in s if k != "gpu"})
        found[gpu] = {"samples": float(len(mine))}
        for c in columns:
            values = [float(s[c]) for s in mine if c in s]
            if values:
                found[gpu][c] = round(sum(values) / len(values), 1)
    return found


def busiest(by_gpu: dict[str, dict[str, float]]) -> tuple[str, dict[str, float]] | None:
    """The GPU with the highest mean ``sm`` (the one serving), or None without samples."""
    if not by_gpu:
        return None
    gpu = max(by_gpu, key=lambda g: (by_gpu[g].get("sm", 0.0), by_gpu[g].get("jpg", 0.0)))
    return gpu, by_gpu[gpu]


def cells(values: dict[str, Any]) -> dict[str, str]:
    """The numbers of a sample's means as the report shows them: the main columns, the other ones by name, then
    each engine family in one cell (``nvjpg``: ``22/0/20/20/20/20/20``, engine 0 first)."""
    numbers = {c: v for c, v in values.items() if isinstance(v, (int, float)) and c not in IGNORED and c != "samples"}
    engines: dict[str, list[tuple[int, float]]] = {}
    plain = {}
    for c, v in numbers.items():
        m = _ENGINE.match(c)
        if m:
            engines.setdefault(m.group(1), []).append((int(m.group(2)), v))
        else:
            plain[c] = v
    names = [c for c in MAIN_COLUMNS if c in plain] + sorted(c for c in plain if c not in MAIN_COLUMNS)
    found = {c: f"{plain[c]:.0f}" for c in names}
    for family, found_values in sorted(engines.items()):
        found[family] = "/".join(f"{v:.0f}" for _, v in sorted(found_values))
    return found


def compact(values: dict[str, Any]) -> str:
    """``sm 97 mem 41 jpg 35 dec 0 smutil 60 nvjpg 22/0/20``: :func:`cells` in one line (numbers only)."""
    return " ".join(f"{c} {v}" for c, v in cells(values).items())


class SmiSampler:
    """A thread that samples with ``nvidia-smi`` while the ``with`` block runs: :meth:`_run` (a subclass's) calls
    :meth:`_call` until :meth:`_stopped`; ``samples`` and ``notes`` (what went wrong) are read after the block."""

    def __init__(self) -> None:
        self.samples: list[dict[str, Any]] = []
        self.notes: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=type(self).__name__)

    def _run(self) -> None:
        raise NotImplementedError

    def _stopped(self, wait_s: float = 0.0) -> bool:
        """Whether the block ended (waiting up to ``wait_s`` for it)."""
        return self._stop.wait(wait_s) if wait_s > 0 else self._stop.is_set()

    def _call(self, args: list[str], timeout_s: float = 20.0) -> tuple[int | None, str]:
        """``nvidia-smi ARGS``: (exit code or None if stopped or timed out, its output)."""
        try:
            proc = subprocess.Popen(["nvidia-smi", *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    text=True)  # fmt: skip
        except OSError as e:
            return -1, str(e)
        waited = 0.0
        while proc.poll() is None and waited < timeout_s and not self._stop.wait(0.1):
            waited += 0.1
        if proc.poll() is None:
            proc.terminate()
        try:
            out, _ = proc.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
            return None, out or ""
        return (proc.returncode if not self._stop.is_set() else None), out or ""

    def __enter__(self) -> SmiSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


class EngineSampler(SmiSampler):
    """Samples every GPU's utilization with ``nvidia-smi`` in a thread while the ``with`` block runs (see the
    module's description); :meth:`result` gives the busiest GPU's means."""

    #: the sampling call that worked last (shared: later samplers start there)
    working: int = 0

    def _run(self) -> None:
        while not self._stopped():
            index = EngineSampler.working
            if index < len(DMON_CALLS):
                code, out = self._call(DMON_CALLS[index])
                found = parse_dmon(out)
            else:
                code, out = self._call(QUERY_CALL)
                found = parse_query(out)
                self._stopped(1.0)
            self.samples += found
            if found or code is None:
                continue
            if index >= len(DMON_CALLS):
                self.notes.append(f"no utilization from nvidia-smi: {out.strip()[:200]}")
                return
            self.notes.append(f"nvidia-smi {' '.join(DMON_CALLS[index])}: {out.strip()[:200] or f'exit {code}'}")
            EngineSampler.working = index + 1

    def result(self) -> dict[str, Any]:
        """``{"gpu", "samples", <column>: mean, ..., "call", "notes"}`` of the busiest GPU; ``{}`` without samples."""
        found = busiest(means(self.samples))
        if found is None:
            return {"notes": self.notes} if self.notes else {}
        gpu, values = found
        call = DMON_CALLS[EngineSampler.working] if EngineSampler.working < len(DMON_CALLS) else QUERY_CALL
        return {"gpu": gpu, **values, "call": " ".join(call), "notes": self.notes}


class ClockSampler(SmiSampler):
    """Reads every GPU's SM clock and power draw every :data:`CLOCK_PERIOD_S` while the ``with`` block runs;
    :meth:`result` gives the GPU that drew the most power (the one serving)."""

    def _run(self) -> None:
        while not self._stopped():
            code, out = self._call(CLOCKS_CALL, timeout_s=10.0)
            found = parse_clocks(out)
            self.samples += found
            if not found and code is not None:
                self.notes.append(f"no clocks from nvidia-smi: {out.strip()[:200] or f'exit {code}'}")
                return
            self._stopped(CLOCK_PERIOD_S)

    def result(self) -> dict[str, Any]:
        """``{"gpu", "samples", "sm_mhz" (mean), "sm_mhz_min", "max_sm_mhz", "power_w" (mean), "notes"}``; ``{}``
        without samples (``{"notes"}`` where something went wrong)."""
        by_gpu = means(self.samples, trim=0)
        if not by_gpu:
            return {"notes": self.notes} if self.notes else {}
        gpu = max(by_gpu, key=lambda g: by_gpu[g].get("power_w", 0.0))
        lowest = [float(s["sm_mhz"]) for s in self.samples if str(s["gpu"]) == gpu and "sm_mhz" in s]
        found = {"gpu": gpu, **by_gpu[gpu], "notes": self.notes}
        if lowest:
            found["sm_mhz_min"] = min(lowest)
        return found


def clocks_text(clocks: dict[str, Any]) -> str:
    """``SM clock 1,755 MHz mean, lowest 1,410 (the GPU's top 1,980); 140 W`` of a :meth:`ClockSampler.result`;
    "" without a clock reading."""
    if "sm_mhz" not in clocks:
        return ""
    text = f"SM clock {clocks['sm_mhz']:,.0f} MHz mean"
    if "sm_mhz_min" in clocks:
        text += f", lowest {clocks['sm_mhz_min']:,.0f}"
    if "max_sm_mhz" in clocks:
        text += f" (the GPU's top {clocks['max_sm_mhz']:,.0f})"
    return text + (f"; {clocks['power_w']:,.0f} W" if "power_w" in clocks else "")


# ------------------------------------------------------------------------------------------- the report
ENGINES_NOTE = (
    "Means of `nvidia-smi dmon` samples (every second, the busiest GPU, each point's first and last sample dropped) "
    "while each point ran. sm: the time a kernel ran; jpg: NVML's JPEG engine utilization (hardware JPEG decode: 0 "
    "means the decoding ran as CUDA kernels on the SMs, or on the CPU); dec: NVDEC; with GPM (Hopper and later): "
    "smutil and smocc, the SMs' activity and occupancy; nvjpg: each NVJPG engine's activity, engine 0 first. jpg and "
    "nvjpg measure differently (an H100 under classify read jpg 81 % while each engine's activity was 26-34 %, and "
    "engine 1 read 0 throughout): nvjpg says how much of each engine's capacity is in use. SM MHz: the mean SM "
    "clock (`nvidia-smi --query-gpu=clocks.sm`, twice a second)."
)


def _cell(values: dict[str, Any], column: str) -> str:
    value = values.get(column)
    return f"{value:.0f}" if isinstance(value, (int, float)) else "-"


def engines_section(rows: list[dict]) -> list[str]:
    """The report's section: each throughput point the ``latency`` phase sampled, its images/s beside the GPU's
    means (none without such rows)."""
    sampled = [r for r in rows if r.get("kind") == "gpu_profile"]
    if not sampled:
        return []
    shown = [cells(r.get("engines") or {}) for r in sampled]
    extra = [c for c in dict.fromkeys(c for s in shown for c in s) if c not in MAIN_COLUMNS]
    header = ["model", "setting", "img/req", "conc", "img/s", "p50 ms", *(f"{c} %" for c in (*MAIN_COLUMNS, *extra)),
              "samples", "SM MHz"]  # fmt: skip
    lines = ["", "## The GPU under load", "", ENGINES_NOTE, "", "| " + " | ".join(header) + " |",
             "|" + "---|" * len(header)]  # fmt: skip
    notes: list[str] = []
    for r, s in zip(sampled, shown):
        e = r.get("engines") or {}
        row = [str(r.get(k, "")) for k in ("config", "setting", "images_per_request", "concurrency")]
        row += [f"{r.get('images_per_s', 0):,.0f}", f"{r.get('p50_ms', 0):.2f}"]
        row += [s.get(c, "-") for c in (*MAIN_COLUMNS, *extra)] + [_cell(e, "samples")]
        row.append(_cell(r.get("clocks") or {}, "sm_mhz"))
        lines.append("| " + " | ".join(row) + " |")
        notes += [n for n in e.get("notes", []) if n not in notes]
    calls = sorted({r["engines"]["call"] for r in sampled if r.get("engines", {}).get("call")})
    lines += [""] + [f"- sampled with `nvidia-smi {c}`" for c in calls] + [f"- {n}" for n in notes]
    return lines


def kernel_split(row: dict[str, Any]) -> list[tuple[str, float]]:
    """One ``kernels`` row of :mod:`scripts.bench.gpu_time` as (part, µs per image): the preprocessing's decode
    (every kernel that is not tritonprep's own: nvImageCodec's and nvJPEG's CUDA stages) and tritonprep's kernels
    (``tritonprep_*``: resize, crop, normalize, layout); the network's kernels; then copies and memsets, and the
    GPU's busy time (the union of all) against the wall time."""
    sums = row.get("sum_us_per_image") or {}
    kernels = float(sums.get("kernel", 0.0))
    copies = float(sums.get("gpu_memcpy", 0.0)) + float(sums.get("gpu_memset", 0.0))
    if row.get("stage") == "preprocess":
        ours = sum(float(k["us_per_image"]) for k in row.get("by_name", []) if k["name"].startswith("tritonprep_"))
        parts = [("decode: nvImageCodec / nvJPEG CUDA kernels", kernels - ours),
                 ("tritonprep kernels (resize, crop, normalize, layout)", ours)]  # fmt: skip
    else:
        parts = [("network kernels", kernels)]
    return parts + [("copies and memsets", copies),
                    ("GPU busy (union of the above)", float(row.get("gpu_busy_us_per_image", 0.0))),
                    ("wall time of the calls", float(row.get("wall_us_per_image", 0.0)))]  # fmt: skip


def kernels_section(summary: dict[str, Any], top: int = 6) -> list[str]:
    """The report's section from the ``kernels`` rows of scripts.bench.gpu_time (``--gpu-time``; none without)."""
    found = [r for r in summary.get("gpu_time_kernels") or [] if r.get("part") == "kernels"]
    if not found:
        return []
    lines = ["", "## GPU time per image by kernel (CUPTI, one process)", "",
             "scripts.bench.gpu_time: the shipped GPU executor (PIXELS) and the network (FP16 NHWC, CUDA graphs, "
             "batch 64), traced alone. Work on the NVJPG engines is not a CUDA kernel and does not show here.", "",
             "| stage | part | µs per image |", "|---|---|---:|"]  # fmt: skip
    for r in found:
        lines += [f"| {r.get('stage', '?')} | {part} | {us:.1f} |" for part, us in kernel_split(r)]
    for r in found:
        lines += [
            "",
            f"The most GPU time of {r.get('stage', '?')}, kernels and copies (µs per image, calls, occupancy %):",
            "",
        ]
        lines += [f"- {k['name'][:90]}: {k['us_per_image']:.2f} µs, {k['calls']} calls, {k['occupancy_pct']:.0f} %"
                  for k in (r.get("by_name") or [])[:top]]  # fmt: skip
    return lines
