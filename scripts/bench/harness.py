#!/usr/bin/env python3
"""Side-by-side benchmark on one GPU machine, in one run, on the same images.

Measures, for real-photo JPEG sets of 500x375, 1280x720, 1920x1080 and 3840x2160:
  (a) the tritonprep preprocessing ensemble (JPEG -> GPU executor -> a sink model standing in
      for the network) through Triton, with perf_analyzer over gRPC (and HTTP);
  (b) the same server with the CPU executor (one instance per core);
  (c) NVIDIA DALI's mixed decode + resize + crop + normalize pipeline (best batch/threads);
  (d) the decode-only ceiling: nvImageCodec batch decode, 1 and 2 threads;
  and the full `classify` ensemble with the real classifier on the runtime present there.
``--phase analyze`` measures decode-once instead: the `analyze` ensemble (two specs, one decode)
against `classify` + `embed` as two ensembles over the same images (scripts/bench/decode_once.py).
Writes results.md, results.csv, *.png and raw perf CSVs into --out, and prints the summary.

    python -m scripts.bench.harness --out /tmp/bench [--plan full|quick] [--skip dali,cpu,classify]
    python -m scripts.bench.harness --out /tmp/bench-analyze --phase analyze [--config 4,200,1.0]
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
from dataclasses import asdict
from pathlib import Path

from scripts import perf_sweep
from tritonprep_testkit import photos as bench_images
from tritonprep_testkit.servers import REPO, local_options

HERE = Path(__file__).resolve().parent

log = logging.getLogger("harness")

PLANS = {
    # sizes, concurrency sweep (500x375), preprocess instance counts to try
    "quick": {"sizes": ["500x375", "1920x1080"], "conc": [1, 16, 64, 128], "instances": [2], "interval": 2500},
    "full": {
        "sizes": ["500x375", "1280x720", "1920x1080", "3840x2160"],
        "conc": [1, 4, 16, 64, 128, 256],
        "instances": [1, 2, 4],
        "interval": 2500,
    },
}


# ---------------------------------------------------------------------- model repositories
def make_repo(
    dest: Path,
    *,
    executor: str,
    instances: int,
    queue_delay_us: int = 2000,
    cpu_threads: int = 0,
    with_classify: bool = False,
    hw_share: float = 1.0,
    sink_instances: int | None = None,
) -> Path:
    """A model repository with preprocess (tuned), sink and prep_sink (+ the classify ensemble)."""
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    kind = "KIND_GPU" if executor == "gpu" else "KIND_CPU"
    shutil.copytree(REPO / "model_repository" / "preprocess", dest / "preprocess")
    cfg = dest / "preprocess" / "config.pbtxt"
    text = cfg.read_text()
    text = re.sub(r"instance_group \[.*\]", f"instance_group [ {{ count: {instances}, kind: {kind} }} ]", text)
    text = re.sub(r"max_queue_delay_microseconds: \d+", f"max_queue_delay_microseconds: {queue_delay_us}", text)
    # capacity, not overload protection, is measured here: the sweep's highest concurrency must
    # not meet the deployed queue bound (64 requests), which would reject requests
    text = re.sub(r"max_queue_size: \d+", "max_queue_size: 4096", text)
    text = text.replace(
        'key: "executor" value: { string_value: "auto" }', f'key: "executor" value: {{ string_value: "{executor}" }}'
    )
    if cpu_threads:
        text += f'parameters {{ key: "cpu_threads" value: {{ string_value: "{cpu_threads}" }} }}\n'
    if hw_share < 1.0:
        text += f'parameters {{ key: "hw_decoder_share" value: {{ string_value: "{hw_share}" }} }}\n'
    cfg.write_text(text)
    for model in ("sink", "prep_sink"):
        shutil.copytree(HERE / "models" / model, dest / model)
    sink_cfg = dest / "sink" / "config.pbtxt"
    n_sink = sink_instances or max(1, min(instances, 4))
    sink_cfg.write_text(sink_cfg.read_text().replace("count: 1, kind: KIND_AUTO", f"count: {n_sink}, kind: {kind}"))
    if with_classify:
        for model in ("classifier", "postprocess", "classify"):
            shutil.copytree(
                REPO / "model_repository" / model, dest / model, ignore=shutil.ignore_patterns("ort-trt-cache")
            )
            model_cfg = dest / model / "config.pbtxt"
            model_cfg.write_text(re.sub(r"max_queue_size: \d+", "max_queue_size: 4096", model_cfg.read_text()))
    return dest


class GpuMemorySampler:
    """Samples the GPU's used memory (nvidia-smi) every ``period`` seconds in a thread."""

    def __init__(self, period: float = 2.0) -> None:
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.period = period

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
                    self.samples.append((time.monotonic() - t0, int(out[0])))
            except (OSError, subprocess.SubprocessError):
                pass
            self._stop.wait(self.period)

    def __enter__(self) -> GpuMemorySampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def start_server(repo: Path, log_path: Path):
    from tritonprep.launcher.process import EmbeddedServer

    server = EmbeddedServer(local_options(repo, cuda_memory_pool_mb=2048, exit_timeout_s=10), log_path)
    server.__enter__()
    return server


def urls(server) -> dict[str, str]:
    return {"grpc": server.options.grpc_url, "http": f"{server.options.host}:{server.options.http_port}"}


# ---------------------------------------------------------------------- the stages
def decode_ceiling(images: list[bytes], threads: int, seconds: float = 3.0) -> float:
    """nvImageCodec decode alone (hardware, then CUDA stages) in ``threads`` threads, batch 256."""
    import cupy as cp

    from tritonprep.decode.nvimgcodec import GpuDecoder

    decoders = []
    for _ in range(threads):
        stream = cp.cuda.Stream(non_blocking=True)
        decoders.append((GpuDecoder(0, stream), stream))
    batch = (images * (256 // len(images) + 1))[:256]
    counts = [0] * threads

    def work(k: int) -> None:
        dec, stream = decoders[k]
        t_end = time.monotonic() + seconds
        while time.monotonic() < t_end:
            dec.decode(batch)
            stream.synchronize()
            counts[k] += len(batch)

    for dec, stream in decoders:  # warm-up
        dec.decode(batch[:8])
        stream.synchronize()
    t0 = time.monotonic()
    ts = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    rate = sum(counts) / (time.monotonic() - t0)
    for dec, _ in decoders:
        dec.close()
    return rate


def run_dali(folder: Path, quick: bool) -> dict:
    cmd = [sys.executable, str(HERE / "dali_bench.py"), "--images", str(folder), "--seconds", "3" if quick else "4"]
    if quick:
        cmd += ["--batch", "128,256", "--threads", "4", "--hw-load", "0.65"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=400, check=False)
    if proc.returncode != 0:
        log.error("DALI benchmark failed: %s", proc.stderr.strip().splitlines()[-5:])
        return {"error": (proc.stderr.strip().splitlines() or ["?"])[-1]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


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
    return [
        f"- date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}",
        f"- commit: {os.environ.get('GIT_COMMIT', 'unknown')}",
        f"- GPU: {smi}",
        f"- host: {os.cpu_count()} CPUs, Python {platform.python_version()}, numpy {numpy.__version__}, CuPy {cupy_v}",
        "- Triton 2.51 (nvidia-pytriton 0.7.0 wheel), perf_analyzer from the perf-analyzer wheel",
    ]


def plot(rows: list[dict], out: Path, soak: list | None = None) -> list[str]:
    """PNG plots via plots.py, where matplotlib is installed (else none: run plots.py elsewhere)."""
    try:
        from scripts.bench import plots
    except ImportError:
        return []
    try:
        return [p.name for p in plots.plot_all(rows, out, soak)]
    except ImportError:
        log.info("matplotlib is not installed here; plot later with scripts/bench/plots.py results.csv --out DIR")
        return []


TUNE_GRID = [  # (preprocess instances, dynamic batching queue delay in us, hardware decoder share)
    (2, 200, 1.0),
    (4, 200, 1.0),
    (2, 200, 0.7),
    (4, 200, 0.7),
    (4, 1000, 0.7),
    (3, 200, 0.8),
]


def load_sets(plan: dict, work: Path) -> tuple[dict[str, list[bytes]], dict[str, Path]]:
    """The JPEG sets (seeded, so every phase of a run sees the same bytes)."""
    sets: dict[str, list[bytes]] = {}
    folders: dict[str, Path] = {}
    for size in plan["sizes"]:
        count = 64 if size == "3840x2160" else 256
        folders[size] = work / "images" / size
        files = sorted(folders[size].glob("*.jpg"))
        if len(files) == count:
            sets[size] = [f.read_bytes() for f in files]
            continue
        sets[size] = bench_images.make_jpegs(*bench_images.SIZES[size], count, seed=42)
        folders[size].mkdir(parents=True, exist_ok=True)
        for i, b in enumerate(sets[size]):
            (folders[size] / f"{i:04d}.jpg").write_bytes(b)
        log.info("images %s: %d files, mean %.1f KB", size, count, sum(map(len, sets[size])) / count / 1e3)
    return sets, folders


def _config(given: str | None, out: Path) -> tuple[int, int, float]:
    """(instances, queue delay us, hw share): ``--config``, else the tuning phase's best, else a default."""
    if given:
        n, delay, share = given.split(",")
        return int(n), int(delay), float(share)
    if (out / "best.json").exists():
        n, delay, share = json.loads((out / "best.json").read_text())
        return int(n), int(delay), float(share)
    return 4, 200, 1.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--plan", choices=sorted(PLANS), default="full")
    parser.add_argument(
        "--phase",
        choices=("tune", "main", "soak", "all", "analyze"),
        default="all",
        help="tune: try the TUNE_GRID configs, keep the best in OUT/best.json; main: all measurements "
        "with the best config; soak: constant load for --soak-seconds; analyze: the analyze ensemble "
        "against classify + embed (decode once, serve two models); not part of all",
    )
    parser.add_argument("--skip", default="", help="comma list of: dali,cpu,classify,http,sizes,ceiling")
    parser.add_argument(
        "--config", help="instances,queue_delay_us,hw_share for the main phase (default: OUT/best.json)"
    )
    parser.add_argument("--soak-seconds", type=int, default=300)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    os.environ["TRITONPREP_PROFILE"] = "1"  # per-phase timings of every model instance in the server logs
    plan = PLANS[args.plan]
    skip = set(filter(None, args.skip.split(",")))
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    work = out / "work"
    sets, folders = load_sets(plan, work)
    rows_path = out / "rows.json"
    rows: list[dict] = json.loads(rows_path.read_text()) if rows_path.exists() else []
    summary_path = out / "summary.json"
    summary: dict[str, object] = json.loads(summary_path.read_text()) if summary_path.exists() else {}

    def triton_sweep(
        label: str,
        server,
        model: str,
        size: str,
        protocols: list[str],
        batches: list[int],
        conc: list[int],
        interval: int | None = None,
        kind: str = "triton",
    ) -> list[dict]:
        res = perf_sweep.sweep(
            model,
            urls(server),
            sets[size],
            protocols,
            batches,
            conc,
            interval or plan["interval"],
            out / "perf",
            admin_key=server.admin_key,
        )
        new = [{"kind": kind, "config": label, "size": size, **asdict(r)} for r in res]
        rows.extend(new)
        return new

    def gpu_label(cfg: tuple[int, int, float]) -> str:
        n, delay, share = cfg
        return f"tritonprep GPU x{n} delay {delay}us hw {share:.1f}"

    def gpu_server(cfg: tuple[int, int, float], tag: str, with_classify: bool = False):
        n, delay, share = cfg
        repo = make_repo(
            work / f"repo-{tag}",
            executor="gpu",
            instances=n,
            queue_delay_us=delay,
            hw_share=share,
            with_classify=with_classify,
            sink_instances=2,
        )
        return start_server(repo, out / f"triton-{tag}.log")

    if args.phase in ("tune", "all"):
        best: tuple[float, tuple[int, int, float]] | None = None
        for cfg in TUNE_GRID:
            server = gpu_server(cfg, f"tune-{cfg[0]}-{cfg[1]}-{cfg[2]}")
            try:
                a = triton_sweep(gpu_label(cfg), server, "prep_sink", "500x375", ["grpc"], [1], [128], 2000, "tune")
                b = triton_sweep(gpu_label(cfg), server, "prep_sink", "500x375", ["grpc"], [8], [32], 2000, "tune")
            finally:
                server.__exit__(None, None, None)
            score = sum(r["images_per_s"] for r in a + b)
            log.info("tune %s: score %.0f", gpu_label(cfg), score)
            if best is None or score > best[0]:
                best = (score, cfg)
        if best:
            (out / "best.json").write_text(json.dumps(list(best[1])))
            summary["tuned_config"] = gpu_label(best[1])

    if args.phase in ("main", "all"):
        cfg = _config(args.config, out)
        label = gpu_label(cfg)
        if "ceiling" not in skip:  # (d) decode-only ceiling
            for size in plan["sizes"]:
                for threads in (1, 2):
                    rate = decode_ceiling(sets[size], threads)
                    rows.append(
                        {
                            "kind": "decode_ceiling",
                            "config": f"nvImageCodec hardware decoder, {threads} thread(s), batch 256",
                            "size": size,
                            "protocol": "-",
                            "images_per_request": 256,
                            "concurrency": threads,
                            "images_per_s": rate,
                            "p50_ms": 0,
                            "p90_ms": 0,
                            "p99_ms": 0,
                            "server_queue_ms": 0,
                            "server_compute_ms": 0,
                            "composing": "",
                        }
                    )
                    log.info("decode ceiling %s %d threads: %.0f img/s", size, threads, rate)
        if "dali" not in skip:  # (c) DALI
            for size in plan["sizes"]:
                res = run_dali(folders[size], quick=args.plan == "quick" or size != "500x375")
                summary[f"dali_{size}"] = res
                if "best" in res:
                    b = res["best"]
                    rows.append(
                        {
                            "kind": "dali",
                            "config": f"DALI {res['dali_version']} batch {b['batch']} threads "
                            f"{b['threads']} hw_decoder_load {b['hw_decoder_load']}",
                            "size": size,
                            "protocol": "-",
                            "images_per_request": b["batch"],
                            "concurrency": 1,
                            "images_per_s": b["images_per_s"],
                            "p50_ms": 0,
                            "p90_ms": 0,
                            "p99_ms": 0,
                            "server_queue_ms": 0,
                            "server_compute_ms": 0,
                            "composing": "",
                        }
                    )
                    log.info("DALI %s: %.0f img/s (%s)", size, b["images_per_s"], b)
        server = gpu_server(cfg, "main")  # (a) tritonprep GPU executor through Triton
        try:
            with GpuMemorySampler() as mem:
                triton_sweep(label, server, "prep_sink", "500x375", ["grpc"], [1], plan["conc"])
                triton_sweep(label, server, "prep_sink", "500x375", ["grpc"], [8], [4, 16, 32, 64, 128])
                if "http" not in skip:
                    triton_sweep(label, server, "prep_sink", "500x375", ["http"], [1], [16, 64])
                    triton_sweep(label, server, "prep_sink", "500x375", ["http"], [8], [16])
                if "sizes" not in skip:
                    for size in plan["sizes"][1:]:
                        triton_sweep(label, server, "prep_sink", size, ["grpc"], [8], [16])
                        if size != "3840x2160":
                            triton_sweep(label, server, "prep_sink", size, ["grpc"], [1], [64])
            summary[f"gpu_memory_mib {label}"] = [m for _, m in mem.samples]
        finally:
            server.__exit__(None, None, None)
        text = (out / "triton-main.log").read_text()
        summary["sink_placement"] = [ln for ln in text.splitlines() if "first batch arrived" in ln][:1]
        summary["profile_main"] = [
            ln.split('"')[1] if '"' in ln else ln for ln in text.splitlines() if "profile " in ln
        ][-8:]
        if "cpu" not in skip:  # (b) CPU executor through Triton
            cores = os.cpu_count() or 1
            repo = make_repo(
                work / "repo-cpu",
                executor="cpu",
                instances=cores,
                cpu_threads=1,
                queue_delay_us=cfg[1],
                sink_instances=2,
            )
            server = start_server(repo, out / "triton-cpu.log")
            try:
                triton_sweep(f"tritonprep CPU x{cores}", server, "prep_sink", "500x375", ["grpc"], [1, 8], [32, 64])
            finally:
                server.__exit__(None, None, None)
        if "classify" not in skip:  # the full classify ensemble with the real classifier
            server = gpu_server(cfg, "classify", with_classify=True)
            try:
                text = (out / "triton-classify.log").read_text()
                runtime = re.findall(
                    r"runtime ([\w-]+)", "\n".join(ln for ln in text.splitlines() if "classifier instance" in ln)
                )
                triton_sweep(
                    f"classify, EfficientNet-Lite0 on {runtime[0] if runtime else '?'}",
                    server,
                    "classify",
                    "500x375",
                    ["grpc"],
                    [1, 8],
                    [1, 16, 64],
                )
            finally:
                server.__exit__(None, None, None)

    if args.phase == "soak":
        cfg = tuple(json.loads((out / "best.json").read_text())) if (out / "best.json").exists() else (4, 200, 1.0)
        server = gpu_server(cfg, "soak")  # type: ignore[arg-type]
        try:
            with GpuMemorySampler(period=5.0) as mem:
                triton_sweep(
                    gpu_label(cfg) + f" soak {args.soak_seconds}s",
                    server,
                    "prep_sink",
                    "500x375",
                    ["grpc"],
                    [8],
                    [32],
                    args.soak_seconds * 1000 // 4,
                    "soak",
                )
            summary["soak_gpu_memory_mib"] = mem.samples
        finally:
            server.__exit__(None, None, None)

    if args.phase == "analyze":  # decode once, serve two models: scripts/bench/decode_once.py
        from scripts.bench import decode_once

        cfg = _config(args.config, out)
        repo = make_repo(
            work / "repo-analyze",
            executor="gpu",
            instances=cfg[0],
            queue_delay_us=cfg[1],
            hw_share=cfg[2],
            with_classify=True,
            sink_instances=2,
        )
        decode_once.add_models(repo, REPO / "model_repository")
        server = start_server(repo, out / "triton-analyze.log")
        try:

            def sweep(model: str, batch: int, conc: int, perf_out: Path) -> list:
                return perf_sweep.sweep(
                    model, urls(server), sets["500x375"], ["grpc"], [batch], [conc], plan["interval"], perf_out,
                    admin_key=server.admin_key,
                )  # fmt: skip

            new, lines = decode_once.compare(sweep, decode_once.GRID[args.plan], out, "500x375")
        finally:
            server.__exit__(None, None, None)
        rows.extend(new)
        summary["decode_once"] = [f"config: {gpu_label(cfg)}", *lines]

    rows_path.write_text(json.dumps(rows))
    summary_path.write_text(json.dumps(summary, indent=1, default=str))
    write_report(rows, summary, out)
    return 0


def write_report(rows: list[dict], summary: dict, out: Path) -> None:
    """results.md, results.csv and the plots, from everything measured so far."""
    keys = [
        "kind",
        "config",
        "size",
        "protocol",
        "images_per_request",
        "concurrency",
        "images_per_s",
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
        "| kind | config | size | proto | img/req | conc | img/s | p50 ms | p90 ms | p99 ms | queue ms | compute ms "
        "| per model |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['kind']} | {r['config']} | {r['size']} | {r['protocol']} | {r['images_per_request']} "
            f"| {r['concurrency']} "
            f"| {r['images_per_s']:,.0f} | {r['p50_ms']:.2f} | {r['p90_ms']:.2f} | {r['p99_ms']:.2f} "
            f"| {r['server_queue_ms']:.2f} | {r['server_compute_ms']:.2f} | {r.get('composing', '')} |"
        )
    best = lambda pred: max((r["images_per_s"] for r in rows if pred(r)), default=0.0)  # noqa: E731
    main_gpu = lambda r: r["kind"] == "triton" and r["config"].startswith("tritonprep GPU") and r["size"] == "500x375"  # noqa: E731
    gpu = best(lambda r: main_gpu(r) and r["protocol"] == "grpc")
    gpu1 = best(lambda r: main_gpu(r) and r["protocol"] == "grpc" and r["images_per_request"] == 1)
    cpu = best(lambda r: r["kind"] == "triton" and r["config"].startswith("tritonprep CPU"))
    dali = best(lambda r: r["kind"] == "dali" and r["size"] == "500x375")
    ceil = best(lambda r: r["kind"] == "decode_ceiling" and r["size"] == "500x375")
    c1 = [
        r
        for r in rows
        if main_gpu(r) and r["concurrency"] == 1 and r["images_per_request"] == 1 and r["protocol"] == "grpc"
    ]
    lines += ["", "## Summary (500x375 q90 JPEGs, gRPC)", ""]
    if "tuned_config" in summary:
        lines.append(f"- configuration chosen by the tuning phase: {summary['tuned_config']}")
    lines.append(
        f"- tritonprep GPU preprocessing ensemble through Triton, best: **{gpu:,.0f} img/s** "
        f"(single-image requests: {gpu1:,.0f} img/s)"
    )
    if dali:
        lines.append(
            f"- DALI pipeline, best: **{dali:,.0f} img/s**; tritonprep / DALI = **{gpu / dali:.2f}x** (goal 1.25x)"
        )
    if cpu:
        lines.append(
            f"- tritonprep CPU executor through Triton, best: **{cpu:,.0f} img/s**; "
            f"GPU / CPU = **{gpu / cpu:.1f}x** (goal 5x)"
        )
    if ceil:
        lines.append(f"- nvImageCodec hardware decode alone (ceiling): **{ceil:,.0f} img/s**")
    if c1:
        lines.append(
            f"- concurrency 1, one image per request: p50 latency {c1[0]['p50_ms']:.2f} ms, mean server compute "
            f"{c1[0]['server_compute_ms']:.2f} ms ({c1[0].get('composing', '')})"
        )
    for k, v in summary.items():
        if k.startswith("gpu_memory") or k.startswith("soak"):
            vals = [x[1] if isinstance(x, (list, tuple)) else x for x in v]  # type: ignore[union-attr]
            if vals:
                lines.append(
                    f"- GPU memory used, {k}: min {min(vals)} MiB, max {max(vals)} MiB over {len(vals)} samples"
                )
    if summary.get("decode_once"):
        lines += ["", "## Decode once, serve two models (500x375, gRPC)", "", *summary["decode_once"]]  # type: ignore[list-item]
    if summary.get("profile_main"):
        lines += [
            "",
            "Per-execute profile of the model instances (last lines of the main run):",
            "",
            "```",
            *summary["profile_main"],
            "```",
        ]  # type: ignore[list-item]
    lines += ["", *[f"![plot]({p})" for p in plot(rows, out, summary.get("soak_gpu_memory_mib"))]]
    (out / "results.md").write_text("\n".join(lines) + "\n")
    sys.stdout.write("\n".join(lines) + "\n")  # the report is this script's output


if __name__ == "__main__":
    sys.exit(main())
