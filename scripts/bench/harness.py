"""Side-by-side benchmark on one GPU machine, in one run, on the same images.

Phases (``--phase``, several with commas; every phase adds rows to OUT/rows.json and the report is
rewritten from all rows after each):

* ``tune``: preprocess configurations (instances, queue delay, hardware decoders per instance) through
  Triton, each with the null ceiling beside it, at 1 and 8 images/request;
* ``main``: the preprocessing against its ceilings and its peer, with the shipped GPU config
  (``model_repository/preprocess/configs/gpu.pbtxt``) unless ``--config`` overrides it:
  (a) ``prep_sink`` = preprocess -> a sink standing in for the network, through Triton with
  perf_analyzer at 1, 8, 32 and 64 images/request; (b) ``null_sink``, the same ensemble shape with a
  preprocess that does no work (the Python backend's own ceiling), at the same points; (c) DALI's
  decode + resize + crop + normalize pipeline swept in process (batch x threads x hw_decoder_load, the
  best reported) and tritonprep's executor in process beside it; (d) the decode ceiling: 1, 3 and 6
  nvImageCodec hardware decoders on threads, with and without preallocation (the best 6-decoder row is
  the ceiling); GPU memory is sampled throughout;
* ``classify``: the whole job, JPEG in, predictions out, through Triton at 1, 8 and 32 images/request,
  the ``classify`` ensemble and the one-process ``classify_fused`` side by side on one server,
  the classifier alone in one process, the network ceiling in PyTorch (``--torch-python``), and the
  pipeline a user would hand-roll (DALI feeding the same ONNX Runtime runtime);
* ``fused``: ``classify_fused`` with each instance count of ``--fused-instances`` (its own server each);
* ``soak``: constant load on ``prep_sink`` for ``--soak-seconds``, GPU memory and CuPy's pool sampled;
* ``analyze``: decode once, serve two models: the ``analyze`` ensemble (two specs, one decode) against
  ``classify`` + ``embed`` as two ensembles over the same images (:mod:`scripts.bench.decode_once`).

Writes results.md, results.csv, summary.json and plots into --out and prints the report.

    python -m scripts.bench.harness --out /tmp/bench --phase main,classify [--plan quick|full]
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import logging
import os
import platform
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import asdict
from pathlib import Path
from typing import Any

from scripts import perf_sweep
from scripts.bench import decode_grid, decode_once
from tritonprep_testkit import photos as bench_images
from tritonprep_testkit.servers import REPO, local_options

HERE = Path(__file__).resolve().parent
log = logging.getLogger("harness")

PLANS = {
    "quick": {"sizes": ["500x375"], "interval": 2000},
    "full": {"sizes": ["500x375", "1280x720", "1920x1080", "3840x2160"], "interval": 2500},
}
#: (images per request, concurrencies) measured for prep_sink and null_sink in the main phase
MAIN_POINTS = [(1, [1, 16, 64, 128]), (8, [16, 64]), (32, [8, 16]), (64, [4, 8])]
#: (images per request, concurrencies) of classify and classify_fused, measured side by side
CLASSIFY_POINTS = [(1, [1]), (1, [16, 64]), (8, [16, 64]), (32, [8, 16])]
#: classify_fused instance counts: (images per request, concurrencies)
FUSED_TUNE_POINTS = [(1, [1]), (8, [64]), (32, [16])]
#: tune grid: (preprocess instances, queue delay us, hardware decoders per instance)
TUNE_GRID = [(2, 0, 2), (4, 0, 1), (4, 0, 2), (6, 0, 2)]
#: the DALI sweep of the main phase (scripts.bench.dali_bench, in process): 3 x 3 x 4 = 36 configurations, each a
#: fresh pipeline, 3 warm-up + 20 timed run() calls; no configuration starts after --budget-s (``--dali-args``
#: appends to these, and an option given again there wins)
DALI_CONFIGS = ["--batch", "64,128,256", "--threads", "2,4,8", "--hw-load", "0.65,0.75,0.9,1.0", "--prefetch", "1",
                "--runs", "20", "--budget-s", "150"]  # fmt: skip
#: wall-clock limits of the DALI sweep's subprocess beyond its --budget-s, and of the in-process executor's (s)
DALI_TIMEOUT_MARGIN_S = 180
INPROCESS_TIMEOUT_S = 300
SHIPPED_GPU_CONFIG = REPO / "model_repository" / "preprocess" / "configs" / "gpu.pbtxt"


# ---------------------------------------------------------------------- model repositories
def _set(text: str, pattern: str, value: str) -> str:
    new, n = re.subn(pattern, value, text)
    if n == 0:
        raise ValueError(f"{pattern!r} not found in the config")
    return new


def _param(text: str, key: str, value: str) -> str:
    line = f'parameters {{ key: "{key}" value: {{ string_value: "{value}" }} }}'
    if f'key: "{key}"' in text:
        return re.sub(rf'parameters \{{ key: "{key}" value: \{{ string_value: "[^"]*" \}} \}}', line, text)
    return text + line + "\n"


def make_repo(
    dest: Path,
    *,
    executor: str = "gpu",
    instances: int | None = None,
    queue_delay_us: int | None = None,
    hw_decoders: int | None = None,
    cpu_threads: int = 0,
    with_classify: bool = False,
    fused_instances: int | None = None,
) -> Path:
    """A repository with preprocess (the shipped GPU config, overridden where asked), null_prep, sink and the
    prep_sink / null_sink ensembles (+ classifier, postprocess and classify)."""
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    shutil.copytree(
        REPO / "model_repository" / "preprocess", dest / "preprocess", ignore=shutil.ignore_patterns("configs")
    )
    text = SHIPPED_GPU_CONFIG.read_text()
    kind = "KIND_GPU" if executor == "gpu" else "KIND_CPU"
    count = instances or int(re.search(r"count: (\d+)", text).group(1))
    text = _set(text, r"instance_group \[.*?\]", f"instance_group [ {{ count: {count}, kind: {kind} }} ]")
    if queue_delay_us is not None:
        text = _set(text, r"max_queue_delay_microseconds: \d+", f"max_queue_delay_microseconds: {queue_delay_us}")
    delay = int(re.search(r"max_queue_delay_microseconds: (\d+)", text).group(1))
    # capacity, not overload protection, is measured here: the deployed queue bound must not reject
    text = _set(text, r"max_queue_size: \d+", "max_queue_size: 4096")
    text = _param(text, "executor", executor)
    if hw_decoders is not None:
        text = _param(text, "hw_decoders", str(hw_decoders))
    if cpu_threads:
        text = _param(text, "cpu_threads", str(cpu_threads))
    (dest / "preprocess" / "config.pbtxt").write_text(text)
    for model in ("sink", "prep_sink", "null_prep", "null_sink"):
        shutil.copytree(HERE / "models" / model, dest / model)
    null_cfg = dest / "null_prep" / "config.pbtxt"
    null = _set(null_cfg.read_text(), r"count: \d+, kind: KIND_GPU", f"count: {count}, kind: KIND_GPU")
    null_cfg.write_text(_set(null, r"max_queue_delay_microseconds: \d+", f"max_queue_delay_microseconds: {delay}"))
    sink_cfg = dest / "sink" / "config.pbtxt"
    sink_cfg.write_text(sink_cfg.read_text().replace("count: 1, kind: KIND_AUTO", f"count: 2, kind: {kind}"))
    if with_classify:
        for model in ("classifier", "postprocess", "classify", "classify_fused"):
            shutil.copytree(REPO / "model_repository" / model, dest / model, ignore=shutil.ignore_patterns("*.plan"))
            decode_once.open_queues(dest / model)
        if fused_instances:
            for cfg in (dest / "classify_fused" / "configs" / "gpu.pbtxt", dest / "classify_fused" / "config.pbtxt"):
                cfg.write_text(
                    _set(
                        cfg.read_text(),
                        r"instance_group \[.*?\]",
                        f"instance_group [ {{ count: {fused_instances}, kind: KIND_GPU }} ]",
                    )  # fmt: skip
                )
    return dest


class GpuMemorySampler:
    """Samples the used memory of the machine's GPUs, summed (nvidia-smi), every ``period`` seconds in a thread."""

    def __init__(self, period: float = 2.0, metrics_url: str | None = None) -> None:
        self.samples: list[tuple[float, int]] = []
        self.pools: list[tuple[float, float]] = []  # (t, CuPy pool bytes summed over the instances)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.period = period
        self.metrics_url = metrics_url

    def _run(self) -> None:
        t0 = time.monotonic()
        while not self._stop.is_set():
            try:
                out = subprocess.run(
                    ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                    capture_output=True,
                    text=True,
                    timeout=10,
                    check=False,
                ).stdout.split()
                if out:
                    self.samples.append((round(time.monotonic() - t0, 1), sum(int(v) for v in out)))
                if self.metrics_url:
                    with urllib.request.urlopen(self.metrics_url, timeout=2) as r:  # noqa: S310 - localhost
                        text = r.read().decode()
                    total = sum(
                        float(v)
                        for v in re.findall(r'^tritonprep_cupy_pool_bytes\{[^}]*kind="total"[^}]*\} (\S+)$', text, re.M)
                    )
                    self.pools.append((round(time.monotonic() - t0, 1), total))
            except (OSError, subprocess.SubprocessError, ValueError):
                pass
            self._stop.wait(self.period)

    def __enter__(self) -> GpuMemorySampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def start_server(repo: Path, log_path: Path) -> Any:
    from tritonprep.launcher.process import EmbeddedServer

    server = EmbeddedServer(local_options(repo, cuda_memory_pool_mb=2048, exit_timeout_s=10), log_path)
    server.__enter__()
    return server


def urls(server: Any) -> dict[str, str]:
    return {"grpc": server.options.grpc_url, "http": f"{server.options.host}:{server.options.http_port}"}


def gpu_memory_by_process() -> dict[str, int]:
    """GPU memory (MiB) each process holds, named by model for Triton's Python stubs (nvidia-smi)."""
    out = subprocess.run(
        ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    usage: dict[str, int] = {}
    for line in out.splitlines():
        try:
            pid, mib = (int(v) for v in line.split(","))
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except (ValueError, OSError):
            continue
        name = Path(argv[0].decode()).name
        if name == "triton_python_backend_stub" and len(argv) > 8:
            name = argv[8].decode()  # the instance name, e.g. preprocess_0_1
        usage[f"{name} (pid {pid})"] = mib
    return usage


def profile_lines(log_path: Path, last: int = 12) -> list[str]:
    """The per-execute phase timings the instances logged (TRITONPREP_PROFILE=1), newest last."""
    text = log_path.read_text(errors="replace") if log_path.is_file() else ""
    return [ln.split('"')[1] if '"' in ln else ln for ln in text.splitlines() if "profile " in ln][-last:]


def gpu_memory_mib() -> int:
    """Used memory of the machine's GPUs, summed (MiB); -1 without nvidia-smi's answer."""
    out = subprocess.run(
        ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.split()
    return sum(int(v) for v in out) if out else -1


def run_dali(folder: Path, extra: list[str] | None = None) -> dict:
    """DALI's in-process sweep (:mod:`scripts.bench.dali_bench`) in a subprocess: its JSON ({dali_version, protocol,
    best, all}); if it crashed or overran its limit, the configurations it had finished (its ``--rows`` file) and
    an ``error``."""
    rows_file = Path(f"/tmp/harness-dali-{os.getpid()}-{time.monotonic_ns()}.jsonl")
    cmd = [sys.executable, "-m", "scripts.bench.dali_bench", "--images", str(folder), "--rows", str(rows_file),
           *DALI_CONFIGS, *(extra or [])]  # fmt: skip
    budget = [float(cmd[i + 1]) for i, c in enumerate(cmd[:-1]) if c == "--budget-s"]  # the last one given wins
    timeout = budget[-1] + DALI_TIMEOUT_MARGIN_S
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False, cwd=REPO)
        stdout, stderr, status = proc.stdout, proc.stderr, f"exit status {proc.returncode}"
    except subprocess.TimeoutExpired as e:  # the partial output comes as bytes
        stdout, status = "", f"killed after {timeout:.0f} s"
        stderr = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
    results = [ln for ln in stdout.splitlines() if ln.startswith("{")]
    if results:
        res = json.loads(results[-1])
    else:
        lines = rows_file.read_text().splitlines() if rows_file.is_file() else []
        salvaged = [json.loads(ln) for ln in lines if ln.startswith("{")]
        head = next((r for r in salvaged if r.get("header")), {})
        done = [r for r in salvaged if not r.get("header")]
        ok = [r for r in done if "images_per_s" in r]
        res = {
            "dali_version": head.get("dali_version", "?"),
            "protocol": head.get("protocol", {}),
            "best": max(ok, key=lambda r: r["images_per_s"]) if ok else None,
            "all": done,
            "error": f"{status}: {(stderr.strip().splitlines() or ['?'])[-1]}",
        }
        log.error("DALI sweep failed (%s): %s; %d configurations salvaged", status, stderr.strip().splitlines()[-5:],
                  len(done))  # fmt: skip
    rows_file.unlink(missing_ok=True)
    return res


def run_json_lines(cmd: list[str], timeout: int = 600, env: dict[str, str] | None = None) -> list[dict]:
    """Rows a subprocess prints or writes as JSON lines (``{out}`` in ``cmd`` is a temporary file)."""
    out = Path(f"/tmp/harness-{os.getpid()}-{time.monotonic_ns()}.jsonl")
    cmd = [str(out) if c == "{out}" else c for c in cmd]
    proc = subprocess.run(
        cmd, capture_output=True, text=True, timeout=timeout, check=False, cwd=REPO, env={**os.environ, **(env or {})}
    )
    text = out.read_text() if out.is_file() else proc.stdout
    out.unlink(missing_ok=True)
    if proc.returncode != 0:
        log.error("%s failed: %s", " ".join(cmd[:4]), proc.stderr.strip().splitlines()[-6:])
    rows = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            rows.append(json.loads(line))
    return rows


# ---------------------------------------------------------------------- report
def environment() -> list[str]:
    smi = subprocess.run(
        ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    import numpy

    try:
        import cupy

        cupy_v = cupy.__version__
    except ImportError:
        cupy_v = "-"
    try:
        import onnxruntime

        ort_v = f"onnxruntime {onnxruntime.__version__} ({', '.join(onnxruntime.get_available_providers()[:2])})"
    except ImportError:
        ort_v = "no onnxruntime"
    return [
        f"- date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}",
        f"- commit: {os.environ.get('GIT_COMMIT', 'unknown')}",
        f"- GPU: {smi}",
        f"- host: {os.cpu_count()} CPUs, Python {platform.python_version()}, numpy {numpy.__version__}, "
        f"CuPy {cupy_v}, {ort_v}",
        "- Triton 2.51 (nvidia-pytriton 0.7.0 wheel), perf_analyzer from the perf-analyzer wheel",
    ]


def _best(rows: list[dict], **match: Any) -> dict | None:
    cands = [r for r in rows if all(r.get(k) == v for k, v in match.items())]
    return max(cands, key=lambda r: r["images_per_s"]) if cands else None


def summary_lines(rows: list[dict], summary: dict) -> list[str]:
    """The goals of the preprocessing and classify issues, each as measured in this run."""
    lines = ["", "## Summary (500x375 q90 JPEGs, gRPC, same run)", ""]
    main = {"kind": "triton", "size": "500x375", "protocol": "grpc"}
    for n in (1, 8, 32, 64):
        prep = _best(rows, **main, config="prep_sink", images_per_request=n)
        null = _best(rows, **main, config="null_sink", images_per_request=n)
        if prep and null:
            lines.append(
                f"- {n} image(s)/request: tritonprep {prep['images_per_s']:,.0f} img/s (c={prep['concurrency']}), "
                f"null ceiling {null['images_per_s']:,.0f} (c={null['concurrency']}): "
                f"**{prep['images_per_s'] / null['images_per_s']:.0%} of the ceiling**"
            )
    dali = _best(rows, kind="dali", size="500x375")
    sweep = summary.get("dali_best")  # the main phase's DALI sweep; rows of older runs have no such entry
    dali_rate = sweep["images_per_s"] if sweep else dali["images_per_s"] if dali else 0
    if sweep:
        lines.append(
            f"- DALI best (in process, swept {sweep.get('swept', '?')} configs): **{dali_rate:,.0f} img/s** "
            f"(batch {sweep.get('batch')}, {sweep.get('threads')} threads, hw_decoder_load "
            f"{sweep.get('hw_decoder_load')}, prefetch {sweep.get('prefetch')})"
            + (f"; {sweep['failed']} of the configs failed" if sweep.get("failed") else "")
        )
    elif dali:
        lines.append(f"- DALI best: **{dali_rate:,.0f} img/s** ({dali['config']})")
    if dali_rate:
        for n in (32, 64):
            prep = _best(rows, **main, config="prep_sink", images_per_request=n)
            if prep:
                lines.append(
                    f"- tritonprep at {n} images/request / DALI best = **{prep['images_per_s'] / dali_rate:.2f}x**"
                )
    inproc = _best(rows, kind="executor_inprocess", size="500x375")
    if inproc:
        ratio = f" = **{inproc['images_per_s'] / dali_rate:.2f} x DALI best (in process)**" if dali_rate else ""
        lines.append(
            f"- tritonprep executor in process (best): **{inproc['images_per_s']:,.0f} img/s** "
            f"(batch {inproc['images_per_request']}, {inproc['concurrency']} executor(s), one thread each){ratio}"
        )
    ceil = summary.get("decode_ceiling_best") or _best(rows, kind="decode_ceiling", size="500x375")
    if ceil:  # the best 6-decoder row of decode_grid.ceiling_grid; beside it the old ceiling's setting
        old = _best(rows, kind="decode_ceiling", size="500x375", concurrency=6, threads=1, prealloc=False)
        tail = f"; old-style (6 decoders, 1 thread each, no prealloc): {old['images_per_s']:,.0f} img/s" if old else ""
        lines.append(f"- decode ceiling: **{ceil['images_per_s']:,.0f} img/s** ({ceil['config']}){tail}")
    for cfg in ("prep_sink", "null_sink", "classify", "classify_fused"):
        c1 = [
            r
            for r in rows
            if r.get("config") == cfg
            and r.get("concurrency") == 1
            and r.get("images_per_request") == 1
            and r.get("kind") == "triton"
        ]
        if c1:
            r = c1[-1]
            lines.append(
                f"- {cfg} at concurrency 1, one image: p50 {r['p50_ms']:.2f} ms, p99 {r['p99_ms']:.2f} ms; "
                f"server {r.get('composing', '')}"
            )
    alone = [r for r in rows if r["kind"] == "classifier" and r.get("batch") == 64]
    prep8 = _best(rows, **main, config="prep_sink", images_per_request=8)
    slowest = min([r["images_per_s"] for r in ([max(alone, key=lambda r: r["images_per_s"])] if alone else [])]
                  + ([prep8["images_per_s"]] if prep8 else []), default=0)  # fmt: skip
    for cfg in ("classify", "classify_fused"):
        for n in (1, 8, 32):
            r = _best(rows, **main, config=cfg, images_per_request=n)
            if r:
                ratio = f"; **{r['images_per_s'] / slowest:.2f}x** min(prep_sink at 8, classifier alone b64)" if (
                    slowest and n == 8) else ""  # fmt: skip
                lines.append(
                    f"- {cfg} at {n} image(s)/request: **{r['images_per_s']:,.0f} img/s** (c={r['concurrency']}, "
                    f"p50 {r['p50_ms']:.1f} ms, p99 {r['p99_ms']:.1f} ms){ratio}"
                )
    for r in rows:
        if r["kind"] == "fused_tune":
            lines.append(
                f"- {r['config']} at {r['images_per_request']} img/request c={r['concurrency']}: "
                f"{r['images_per_s']:,.0f} img/s, p50 {r['p50_ms']:.2f} ms; server {r.get('composing', '')}"
            )
    for b in (1, 8, 64, 256):
        cls = [r for r in rows if r["kind"] == "classifier" and r.get("batch") == b]
        torch = [r for r in rows if r["kind"] == "torch_ceiling" and r.get("batch") == b and "graph" in r["config"]]
        if cls:
            best = max(cls, key=lambda r: r["images_per_s"])
            tail = ""
            if torch:
                ratio = best["images_per_s"] / torch[0]["images_per_s"]
                tail = f"; PyTorch CUDA-graph ceiling {torch[0]['images_per_s']:,} img/s -> **{ratio:.2f}x**"
            lines.append(
                f"- classifier alone b{b}: {best['images_per_s']:,} img/s, {best['latency_ms']:.2f} ms "
                f"({best['config']}){tail}"
            )
    for k, v in summary.items():
        if k.startswith(("gpu_memory", "soak")) and isinstance(v, list) and v:
            vals = [x[1] if isinstance(x, (list, tuple)) else x for x in v]
            lines.append(f"- {k}: min {min(vals):,.0f}, max {max(vals):,.0f} over {len(vals)} samples")
    return lines


def write_report(rows: list[dict], summary: dict, out: Path) -> None:
    """results.md, results.csv and the plots, from everything measured so far."""
    keys = [
        "kind",
        "config",
        "size",
        "protocol",
        "images_per_request",
        "concurrency",
        "batch",
        "images_per_s",
        "latency_ms",
        "p50_ms",
        "p90_ms",
        "p99_ms",
        "server_queue_ms",
        "server_compute_ms",
        "composing",
    ]
    with open(out / "results.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    lines = ["# tritonprep benchmark", "", *environment(), ""]
    lines += [
        "| kind | config | size | img/req or batch | conc | img/s | p50 ms | p99 ms | queue ms | compute ms "
        "| per model |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['kind']} | {r.get('config', '')} | {r.get('size', '')} "
            f"| {r.get('images_per_request', r.get('batch', ''))} "
            f"| {r.get('concurrency', '')} | {r['images_per_s']:,.0f} | {r.get('p50_ms', r.get('latency_ms', 0)):.2f} "
            f"| {r.get('p99_ms', 0):.2f} | {r.get('server_queue_ms', 0):.2f} | {r.get('server_compute_ms', 0):.2f} "
            f"| {r.get('composing', '')} |"
        )
    lines += summary_lines(rows, summary)
    if summary.get("decode_once"):
        lines += ["", "## Decode once, serve two models (500x375, gRPC)", "", *summary["decode_once"]]
    if summary.get("profile_main"):
        lines += [
            "",
            "Per-execute profile of the model instances (last lines of the main run):",
            "",
            "```",
            *summary["profile_main"],
            "```",
        ]
    (out / "results.md").write_text("\n".join(lines) + "\n")
    sys.stdout.write("\n".join(lines) + "\n")  # the report is this script's output


# ---------------------------------------------------------------------- phases
class Run:
    """One harness run: images, rows and summary, persisted after every step."""

    def __init__(self, out: Path, plan: dict, interval: int | None) -> None:
        self.out, self.plan = out, plan
        self.interval = interval or plan["interval"]
        self.work = out / "work"
        self.rows: list[dict] = json.loads((out / "rows.json").read_text()) if (out / "rows.json").exists() else []
        self.summary: dict[str, Any] = (
            json.loads((out / "summary.json").read_text()) if (out / "summary.json").exists() else {}
        )
        self.sets, self.folders = self._load_sets()

    def _load_sets(self) -> tuple[dict[str, list[bytes]], dict[str, Path]]:
        sets: dict[str, list[bytes]] = {}
        folders: dict[str, Path] = {}
        for size in self.plan["sizes"]:
            count = 64 if size == "3840x2160" else 256
            folders[size] = self.work / "images" / size
            files = sorted(folders[size].glob("*.jpg"))
            if len(files) == count:
                sets[size] = [f.read_bytes() for f in files]
                continue
            sets[size] = bench_images.make_jpegs(*bench_images.SIZES[size], count, seed=42)
            folders[size].mkdir(parents=True, exist_ok=True)
            for i, b in enumerate(sets[size]):
                (folders[size] / f"{i:04d}.jpg").write_bytes(b)
        return sets, folders

    def save(self) -> None:
        (self.out / "rows.json").write_text(json.dumps(self.rows))
        (self.out / "summary.json").write_text(json.dumps(self.summary, indent=1, default=str))

    def sweep(
        self,
        label: str,
        server: Any,
        model: str,
        batches: list[int],
        conc: list[int],
        size: str = "500x375",
        kind: str = "triton",
        protocols: tuple[str, ...] = ("grpc",),
        interval: int | None = None,
    ) -> list[dict]:
        res = perf_sweep.sweep(
            model,
            urls(server),
            self.sets[size],
            list(protocols),
            batches,
            conc,
            interval or self.interval,
            self.out / "perf",
            admin_key=server.admin_key,
        )
        new = [{"kind": kind, "config": label, "size": size, **asdict(r)} for r in res]
        for r in new:
            log.info(
                "%s %s %s b%d c%d: %.0f img/s p50 %.2f ms",
                kind,
                label,
                size,
                r["images_per_request"],
                r["concurrency"],
                r["images_per_s"],
                r["p50_ms"],
            )
        self.rows.extend(new)
        self.save()
        return new


def phase_tune(run: Run) -> None:
    best: tuple[float, tuple] | None = None
    for cfg in TUNE_GRID:
        n, delay, hw = cfg
        tag = f"tune-{n}-{delay}-{hw}"
        server = start_server(
            make_repo(run.work / f"repo-{tag}", instances=n, queue_delay_us=delay, hw_decoders=hw),
            run.out / f"triton-{tag}.log",
        )
        try:
            label = f"x{n} delay {delay}us hw_decoders {hw}"
            a = run.sweep(f"prep_sink {label}", server, "prep_sink", [1], [128], kind="tune", interval=1500)
            b = run.sweep(f"prep_sink {label}", server, "prep_sink", [8], [64], kind="tune", interval=1500)
            run.sweep(f"null_sink x{n} delay {delay}us", server, "null_sink", [1], [128], kind="tune", interval=1500)
            run.sweep(f"null_sink x{n} delay {delay}us", server, "null_sink", [8], [64], kind="tune", interval=1500)
            run.summary[f"gpu_memory_mib_after {tag}"] = gpu_memory_mib()
        finally:
            server.__exit__(None, None, None)
        run.summary[f"profile {tag}"] = profile_lines(run.out / f"triton-{tag}.log", 6)
        score = sum(r["images_per_s"] for r in a + b)
        if best is None or score > best[0]:
            best = (score, cfg)
    if best:
        (run.out / "best.json").write_text(json.dumps(list(best[1])))
        run.summary["tuned_config"] = best[1]


def phase_main(run: Run, args: argparse.Namespace) -> None:
    skip = args.skip
    if "ceiling" not in skip:
        # 1, 3, 6 decoders x (1 thread, no prealloc = the old ceiling; 1 thread, prealloc; default threads,
        # prealloc), each in a fresh process, 1.5 s each; the ceiling is the best 6-decoder row
        grid = decode_grid.ceiling_grid(1.5)
        for g in grid:
            run.rows.append(
                {
                    "kind": "decode_ceiling",
                    "config": f"nvImageCodec: {decode_grid.ceiling_label(g)}, on threads, batch {g['batch']}"
                    + (f" (failed: {g['error']})" if g.get("error") else ""),
                    "size": "500x375",
                    "protocol": "-",
                    "images_per_request": g["batch"],
                    "concurrency": g["decoders"],
                    "images_per_s": g["images_per_s"],
                    "p50_ms": 0,
                    "p90_ms": 0,
                    "p99_ms": 0,
                    "decoders": g["decoders"],
                    "threads": g["threads"],
                    "prealloc": g["prealloc"],
                }
            )
        best = decode_grid.ceiling_best(grid)
        if best is not None:
            run.summary["decode_ceiling_best"] = {**best, "config": decode_grid.ceiling_label(best)}
        run.save()
    if "dali" not in skip:
        # the whole sweep in one process (each configuration a fresh pipeline), every configuration a row
        res = run_dali(run.folders["500x375"], args.dali_args.split())
        run.summary["dali_500x375"] = res
        version = res.get("dali_version", "?")
        for r in res.get("all", []):
            note = f" (failed: {r['error']})" if r.get("error") else f" (not run: {r['skipped']})" if r.get(
                "skipped") else ""  # fmt: skip
            run.rows.append(
                {
                    "kind": "dali",
                    "config": f"DALI {version} in process: batch {r['batch']}, {r['threads']} threads, "
                    f"hw_decoder_load {r['hw_decoder_load']}, prefetch {r.get('prefetch', '?')}{note}",
                    "size": "500x375",
                    "protocol": "-",
                    "images_per_request": r["batch"],
                    "concurrency": 1,
                    "images_per_s": r.get("images_per_s", 0),
                    "p50_ms": 0,
                    "p90_ms": 0,
                    "p99_ms": 0,
                    "median_run_ms": r.get("median_run_ms", 0),
                }
            )
        measured = [r for r in res.get("all", []) if "images_per_s" in r]
        failed = [r for r in res.get("all", []) if r.get("error")]
        if res.get("best"):
            run.summary["dali_best"] = {**res["best"], "swept": len(measured) + len(failed), "failed": len(failed),
                                        "dali_version": version}  # fmt: skip
            log.info("DALI best of %d configurations: %s", len(measured), res["best"])
        else:
            run.summary.pop("dali_best", None)
            log.error("DALI sweep: no configuration measured (%s)", res.get("error", "see the rows"))
        run.save()
    if "inprocess" not in skip:
        # tritonprep's GPU executor in one process, the DALI sweep's protocol: 1, 2 and 4 executors on threads
        cmd = [sys.executable, "-m", "scripts.bench.inprocess", "--images", str(run.folders["500x375"]), "--out",
               "{out}"]  # fmt: skip
        try:
            new = run_json_lines(cmd, timeout=INPROCESS_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            log.error("in-process executor benchmark overran %d s", INPROCESS_TIMEOUT_S)
            new = []
        for r in new:
            run.rows.append(
                {
                    "kind": "executor_inprocess",
                    "config": r.get("config", "?") + (f" (failed: {r['error']})" if r.get("error") else ""),
                    "size": "500x375",
                    "protocol": "-",
                    "images_per_request": r.get("batch", 0),
                    "concurrency": r.get("executors", 0),
                    "images_per_s": r.get("images_per_s", 0),
                    "p50_ms": 0,
                    "p90_ms": 0,
                    "p99_ms": 0,
                }
            )
        run.save()
    overrides = {}
    if args.config:
        n, delay, hw = (int(v) for v in args.config.split(","))
        overrides = {"instances": n, "queue_delay_us": delay, "hw_decoders": hw}
    server = start_server(make_repo(run.work / "repo-main", **overrides), run.out / "triton-main.log")
    try:
        base = gpu_memory_mib()
        metrics_url = f"http://{server.options.host}:{server.options.metrics_port}/metrics"
        with GpuMemorySampler(metrics_url=metrics_url) as mem:
            for model in ("prep_sink", "null_sink"):
                for n, conc in MAIN_POINTS:
                    run.sweep(model, server, model, [n], conc)
            if "sizes" not in skip:
                for size in run.plan["sizes"][1:]:
                    run.sweep("prep_sink", server, "prep_sink", [8], [16], size=size)
        run.summary["gpu_memory_mib main"] = [base] + [m for _, m in mem.samples]
        run.summary["cupy_pool_bytes main"] = [p for _, p in mem.pools]
        run.summary["gpu_memory_by_process main"] = gpu_memory_by_process()
    finally:
        server.__exit__(None, None, None)
    text = (run.out / "triton-main.log").read_text()
    run.summary["profile_main"] = profile_lines(run.out / "triton-main.log")
    run.summary["preprocess_instances"] = [ln for ln in text.splitlines() if "preprocess instance" in ln][:2]
    if "cpu" not in skip:
        cores = os.cpu_count() or 1
        server = start_server(
            make_repo(run.work / "repo-cpu", executor="cpu", instances=cores, cpu_threads=1), run.out / "triton-cpu.log"
        )
        try:
            run.sweep(f"tritonprep CPU x{cores}", server, "prep_sink", [8], [32, 64])
        finally:
            server.__exit__(None, None, None)
    run.save()


def phase_classify(run: Run, args: argparse.Namespace) -> None:
    skip = args.skip
    if "classifier" not in skip:
        run.rows += run_json_lines([sys.executable, "-m", "scripts.bench.classifier_bench", "ort", "--out", "{out}"])
        run.save()
    if args.torch_python and "torch" not in skip:
        run.rows += run_json_lines(
            [args.torch_python, str(HERE / "torch_ceiling.py")],
            env={"PYTHONPATH": os.environ.get("TORCH_EXTRA_PATH", "")},
        )
        run.save()
    if "dali" not in skip:
        run.rows += run_json_lines(
            [
                sys.executable,
                "-m",
                "scripts.bench.classifier_bench",
                "dali",
                "--out",
                "{out}",
                "--images",
                str(run.folders["500x375"]),
            ]
        )
        run.save()
    server = start_server(make_repo(run.work / "repo-classify", with_classify=True), run.out / "triton-classify.log")
    try:
        text = (run.out / "triton-classify.log").read_text()
        run.summary["classifier_runtime"] = [ln for ln in text.splitlines() if "classifier instance" in ln][:1]
        # the ensemble and the one-process model side by side, point by point, on one server
        for n, conc in CLASSIFY_POINTS:
            for model in ("classify", "classify_fused"):
                run.sweep(model, server, model, [n], conc)
        run.summary["gpu_memory_by_process classify"] = gpu_memory_by_process()
    finally:
        server.__exit__(None, None, None)
    run.summary["profile classify"] = profile_lines(run.out / "triton-classify.log")
    text = (run.out / "triton-classify.log").read_text()
    run.summary["classify_log"] = [ln for ln in text.splitlines() if "classifier" in ln][:6]
    run.save()


def phase_fused(run: Run, args: argparse.Namespace) -> None:
    """``classify_fused`` with each instance count of ``--fused-instances``: throughput, c=1 latency, memory."""
    for n in (int(v) for v in args.fused_instances.split(",")):
        tag = f"fused-x{n}"
        server = start_server(make_repo(run.work / f"repo-{tag}", with_classify=True, fused_instances=n),
                              run.out / f"triton-{tag}.log")  # fmt: skip
        try:
            for b, conc in FUSED_TUNE_POINTS:
                run.sweep(f"classify_fused x{n}", server, "classify_fused", [b], conc, kind="fused_tune")
            run.summary[f"gpu_memory_by_process {tag}"] = gpu_memory_by_process()
        finally:
            server.__exit__(None, None, None)
        run.summary[f"profile {tag}"] = profile_lines(run.out / f"triton-{tag}.log", 6)
    run.save()


def phase_analyze(run: Run, args: argparse.Namespace) -> None:
    repo = make_repo(run.work / "repo-analyze", with_classify=True)
    decode_once.add_models(repo, REPO / "model_repository")
    server = start_server(repo, run.out / "triton-analyze.log")
    try:

        def sweep(model: str, batch: int, conc: int, perf_out: Path) -> list:
            return perf_sweep.sweep(model, urls(server), run.sets["500x375"], ["grpc"], [batch], [conc], run.interval,
                                    perf_out, admin_key=server.admin_key)  # fmt: skip

        new, lines = decode_once.compare(sweep, decode_once.GRID[args.plan], run.out, "500x375")
    finally:
        server.__exit__(None, None, None)
    run.rows.extend(new)
    run.summary["decode_once"] = lines
    run.save()


def phase_soak(run: Run, args: argparse.Namespace) -> None:
    server = start_server(make_repo(run.work / "repo-soak"), run.out / "triton-soak.log")
    try:
        base = gpu_memory_mib()
        run.summary["gpu_memory_by_process soak start"] = gpu_memory_by_process()
        metrics_url = f"http://{server.options.host}:{server.options.metrics_port}/metrics"
        with GpuMemorySampler(period=5.0, metrics_url=metrics_url) as mem:
            # back-to-back perf_analyzer runs of ~30 s each, so the load is constant and the phase ends on time
            # (one run over the whole duration waits for its stability windows and can overrun it)
            deadline = time.monotonic() + args.soak_seconds
            while time.monotonic() < deadline:
                run.sweep(f"prep_sink soak {args.soak_seconds}s", server, "prep_sink", [8], [64], kind="soak",
                          interval=10_000)  # fmt: skip
        run.summary["soak_gpu_memory_mib"] = [(0.0, base), *mem.samples]
        run.summary["soak_cupy_pool_bytes"] = mem.pools
        run.summary["gpu_memory_by_process soak end"] = gpu_memory_by_process()
    finally:
        server.__exit__(None, None, None)
    run.save()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--plan", choices=sorted(PLANS), default="quick")
    parser.add_argument("--phase", default="main", help="comma list of: tune, main, classify, fused, analyze, soak")
    parser.add_argument(
        "--skip", default="", help="comma list of: ceiling, dali, inprocess, cpu, sizes, classifier, torch"
    )
    parser.add_argument(
        "--config", help="main phase: instances,queue_delay_us,hw_decoders instead of the shipped config"
    )
    parser.add_argument("--interval", type=int, help="perf_analyzer measurement interval, ms")
    parser.add_argument("--soak-seconds", type=int, default=300)
    parser.add_argument("--fused-instances", default="2,3,4", help="fused phase: classify_fused instance counts")
    parser.add_argument("--torch-python", help="a Python with CUDA PyTorch for the network ceiling")
    parser.add_argument(
        "--dali-args",
        default="",
        help='main phase: more scripts.bench.dali_bench options for the DALI sweep, e.g. "--batch 128 --threads 4" '
        '(to shorten it) or "--prefetch 1,2"',
    )
    args = parser.parse_args(argv)
    args.skip = set(filter(None, args.skip.split(",")))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    os.environ["TRITONPREP_PROFILE"] = "1"  # per-phase timings of every model instance in the server logs
    args.out.mkdir(parents=True, exist_ok=True)
    run = Run(args.out, PLANS[args.plan], args.interval)
    for phase in filter(None, args.phase.split(",")):
        t0 = time.monotonic()
        {
            "tune": lambda: phase_tune(run),
            "main": lambda: phase_main(run, args),
            "classify": lambda: phase_classify(run, args),
            "soak": lambda: phase_soak(run, args),
            "analyze": lambda: phase_analyze(run, args),
            "fused": lambda: phase_fused(run, args),
        }[phase]()
        log.info("phase %s done in %.0f s", phase, time.monotonic() - t0)
        write_report(run.rows, run.summary, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
