#!/usr/bin/env python3
"""Plots of a benchmark run (needs matplotlib): reads the harness's results.csv, writes PNGs.

throughput_vs_concurrency.png  images/s against concurrent requests, per configuration (tritonprep,
                               the null ceiling, classify), with DALI's and the decoder's ceilings
latency_percentiles.png        p50 / p99 latency against concurrent requests
classifier_vs_ceiling.png      the classifier alone (ONNX Runtime variants) against PyTorch's CUDA-graph ceiling
cost_vs_pixels.png             images/s and megapixels/s per image size, per pipeline (full plan)
soak_gpu_memory.png            GPU memory over a soak run (with --soak-summary)

  python -m scripts.bench.plots results.csv --out DIR [--soak-summary soak-summary.json] [--title "H100, date, commit"]
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

SIZES = {"500x375": 500 * 375, "1280x720": 1280 * 720, "1920x1080": 1920 * 1080, "3840x2160": 3840 * 2160}


def read_rows(path: Path) -> list[dict]:
    with open(path) as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        for k in ("images_per_request", "concurrency", "batch"):
            r[k] = int(float(r[k])) if r.get(k) else 0
        for k in ("images_per_s", "p50_ms", "p90_ms", "p99_ms", "latency_ms"):
            r[k] = float(r[k]) if r.get(k) else 0.0
    return rows


def _save(fig, path: Path) -> Path:
    """Lay out, write (110 dpi) and close ``fig``; return ``path``."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_all(rows: list[dict], out: Path, soak: list | None = None, title: str = "") -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    written = []
    series: dict[str, list[dict]] = {}
    for r in rows:
        if r["kind"] == "triton" and r.get("size") == "500x375":
            series.setdefault(f"{r['config']} | {r['protocol']} | {r['images_per_request']} img/req", []).append(r)

    fig, ax = plt.subplots(figsize=(9, 5.5))
    for label, rs in sorted(series.items()):
        rs = sorted(rs, key=lambda r: r["concurrency"])
        ax.plot([r["concurrency"] for r in rs], [r["images_per_s"] for r in rs], marker="o", label=label)
    for kind, color in (("dali", "gray"), ("decode_ceiling", "black")):
        best = max((r for r in rows if r["kind"] == kind and r.get("size") == "500x375"),
                   key=lambda r: r["images_per_s"], default=None)  # fmt: skip
        if best is not None:
            ax.axhline(best["images_per_s"], linestyle="--", color=color)
            ax.annotate(best["config"], (1, best["images_per_s"]), fontsize=7, va="bottom")
    ax.set(
        xscale="log",
        xlabel="concurrent requests",
        ylabel="images/s",
        title=f"Throughput vs concurrency, 500x375 JPEGs\n{title}",
    )
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=6)
    written.append(_save(fig, out / "throughput_vs_concurrency.png"))

    fig, ax = plt.subplots(figsize=(9, 5.5))
    for label, rs in sorted(series.items()):
        rs = sorted(rs, key=lambda r: r["concurrency"])
        line = ax.plot([r["concurrency"] for r in rs], [r["p50_ms"] for r in rs], marker="o", label=f"p50 {label}")
        ax.plot(
            [r["concurrency"] for r in rs],
            [r["p99_ms"] for r in rs],
            marker="x",
            linestyle="--",
            color=line[0].get_color(),
            label=f"p99 {label}",
        )
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="concurrent requests",
        ylabel="latency (ms)",
        title=f"Latency percentiles vs concurrency, 500x375 JPEGs\n{title}",
    )
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=5, ncol=2)
    written.append(_save(fig, out / "latency_percentiles.png"))

    nets = [r for r in rows if r["kind"] in ("classifier", "torch_ceiling")]
    if nets:
        fig, ax = plt.subplots(figsize=(9, 5.5))
        for config in sorted({r["config"] for r in nets}):
            rs = sorted((r for r in nets if r["config"] == config), key=lambda r: r["batch"])
            style = "--" if rs[0]["kind"] == "torch_ceiling" else "-"
            ax.plot([r["batch"] for r in rs], [r["images_per_s"] for r in rs], style, marker="o", label=config)
        ax.set(xscale="log", yscale="log", xlabel="batch", ylabel="images/s",
               title=f"EfficientNet-Lite0 alone, input on the GPU\n{title}")  # fmt: skip
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=6)
        written.append(_save(fig, out / "classifier_vs_ceiling.png"))

    best: dict[tuple[str, str], float] = {}
    for r in rows:
        if r.get("size") not in SIZES or r["kind"] not in ("triton", "dali", "decode_ceiling"):
            continue
        name = {"dali": "DALI pipeline", "decode_ceiling": "nvImageCodec decode only"}.get(r["kind"])
        if name is None:
            if r["config"] != "prep_sink":
                continue
            name = "tritonprep GPU through Triton"
        best[(name, r["size"])] = max(best.get((name, r["size"]), 0.0), r["images_per_s"])
    if len({s for _, s in best}) > 1:
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4.8))
        for name in sorted({n for n, _ in best}):
            pts = sorted((SIZES[s], v) for (n, s), v in best.items() if n == name)
            a1.plot([p / 1e6 for p, _ in pts], [v for _, v in pts], marker="o", label=name)
            a2.plot([p / 1e6 for p, _ in pts], [v * p / 1e6 for p, v in pts], marker="o", label=name)
        a1.set(
            xscale="log",
            yscale="log",
            xlabel="megapixels per image",
            ylabel="images/s",
            title="Throughput by image size",
        )
        a2.set(xscale="log", xlabel="megapixels per image", ylabel="megapixels/s", title="Pixel rate by image size")
        for a in (a1, a2):
            a.grid(True, alpha=0.3)
            a.legend(fontsize=7)
        written.append(_save(fig, out / "cost_vs_pixels.png"))

    if soak:
        fig, ax = plt.subplots(figsize=(8, 4))
        ax.plot([t for t, _ in soak], [m for _, m in soak], marker=".")
        ax.set(xlabel="seconds into the run", ylabel="GPU memory used (MiB)",
               title=f"GPU memory under constant load\n{title}")  # fmt: skip
        ax.grid(True, alpha=0.3)
        written.append(_save(fig, out / "soak_gpu_memory.png"))
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("csv", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--soak-summary", type=Path)
    parser.add_argument("--title", default="", help="a second title line: GPU, date, commit")
    args = parser.parse_args(argv)
    soak = json.loads(args.soak_summary.read_text()).get("soak_gpu_memory_mib") if args.soak_summary else None
    for p in plot_all(read_rows(args.csv), args.out, soak, args.title):
        sys.stdout.write(f"{p}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
