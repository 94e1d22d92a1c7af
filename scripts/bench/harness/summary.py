"""The summary of the preprocessing and classify issues' figures (500x375, gRPC), as measured in a run, for its
first server setting: preprocessing against the null ceiling, DALI and the decode ceiling, latency at c=1,
classify and classify_fused, the classifier alone against PyTorch."""

from __future__ import annotations

from .figures import best, ceiling_rate, dali_rate, setting_of, settings_measured
from .goals import PACE_GOAL

MAIN = {"kind": "triton", "size": "500x375", "protocol": "grpc"}


def _preprocessing(rows: list[dict], summary: dict, dali: float) -> list[str]:
    lines = []
    for n in (1, 8, 32, 64):
        prep = best(rows, **MAIN, config="prep_sink", images_per_request=n)
        null = best(rows, **MAIN, config="null_sink", images_per_request=n)
        if prep and null:
            lines.append(
                f"- {n} image(s)/request: tritonprep {prep['images_per_s']:,.0f} img/s (c={prep['concurrency']}), "
                f"null ceiling {null['images_per_s']:,.0f} (c={null['concurrency']}): "
                f"**{prep['images_per_s'] / null['images_per_s']:.0%} of the ceiling**"
            )
    sweep = summary.get("dali_best")  # the main phase's DALI sweep; rows of older runs have no such entry
    row = best(rows, kind="dali", size="500x375")
    if sweep:
        lines.append(
            f"- DALI best (in process, swept {sweep.get('swept', '?')} configs): **{dali:,.0f} img/s** "
            f"(batch {sweep.get('batch')}, {sweep.get('threads')} threads, hw_decoder_load "
            f"{sweep.get('hw_decoder_load')}, prefetch {sweep.get('prefetch')})"
            + (f"; {sweep['failed']} of the configs failed" if sweep.get("failed") else "")
        )
    elif row:
        lines.append(f"- DALI best: **{dali:,.0f} img/s** ({row['config']})")
    if dali:
        for n in (32, 64):
            prep = best(rows, **MAIN, config="prep_sink", images_per_request=n)
            if prep:
                lines.append(f"- tritonprep at {n} images/request / DALI best = **{prep['images_per_s'] / dali:.2f}x**")
    inproc = best(rows, kind="executor_inprocess", size="500x375")
    if inproc:
        ratio = f" = **{inproc['images_per_s'] / dali:.2f} x DALI best (in process)**" if dali else ""
        lines.append(
            f"- tritonprep executor in process (best): **{inproc['images_per_s']:,.0f} img/s** "
            f"(batch {inproc['images_per_request']}, {inproc['concurrency']} executor(s), one thread each){ratio}"
        )
    ceil = summary.get("decode_ceiling_best") or best(rows, kind="decode_ceiling", size="500x375")
    if ceil:  # the best 6-decoder row of decode_grid.ceiling_grid; beside it the old ceiling's setting
        old = best(rows, kind="decode_ceiling", size="500x375", concurrency=6, threads=1, prealloc=False)
        tail = f"; old-style (6 decoders, 1 thread each, no prealloc): {old['images_per_s']:,.0f} img/s" if old else ""
        lines.append(f"- decode ceiling: **{ceiling_rate(rows, summary):,.0f} img/s** ({ceil['config']}){tail}")
    return lines


def _classify(rows: list[dict]) -> list[str]:
    lines = []
    for cfg in ("prep_sink", "null_sink", "classify", "classify_fused"):
        c1 = [r for r in rows if r.get("config") == cfg and r.get("concurrency") == 1
              and r.get("images_per_request") == 1 and r.get("kind") == "triton"]  # fmt: skip
        if c1:
            r = c1[-1]
            lines.append(
                f"- {cfg} at concurrency 1, one image: p50 {r['p50_ms']:.2f} ms, p99 {r['p99_ms']:.2f} ms; "
                f"server {r.get('composing', '')}"
            )
    alone = best([r for r in rows if r["kind"] == "classifier" and r.get("batch") == 64])
    prep8 = best(rows, **MAIN, config="prep_sink", images_per_request=8)
    slowest = min([r["images_per_s"] for r in (alone, prep8) if r], default=0)
    for cfg in ("classify", "classify_fused"):
        for n in (1, 8, 32):
            r = best(rows, **MAIN, config=cfg, images_per_request=n)
            if r:
                ratio = f"; **{r['images_per_s'] / slowest:.2f}x** min(prep_sink at 8, classifier alone b64)" if (
                    slowest and n == 8) else ""  # fmt: skip
                lines.append(
                    f"- {cfg} at {n} image(s)/request: **{r['images_per_s']:,.0f} img/s** (c={r['concurrency']}, "
                    f"p50 {r['p50_ms']:.1f} ms, p99 {r['p99_ms']:.1f} ms){ratio}"
                )
    return lines + _sharing(rows, alone)


def _sharing(rows: list[dict], alone: dict | None) -> list[str]:
    """``classify`` against the bound of its two GPU stages taking turns (1/(1/prep_sink + 1/network)) and against
    the network alone, and the GPU time per image the preprocessing adds beside the network's."""
    lines = []
    for n in (8, 32):
        whole = best(rows, **MAIN, config="classify", images_per_request=n)
        prep = best(rows, **MAIN, config="prep_sink", images_per_request=n)
        if not (whole and prep and alone):
            continue
        c, p, net = whole["images_per_s"], prep["images_per_s"], alone["images_per_s"]
        turns = 1 / (1 / p + 1 / net)
        added, allowed = 1e6 / c - 1e6 / net, 1e6 / (PACE_GOAL * net) - 1e6 / net
        lines.append(
            f"- classify at {n} image(s)/request: {c:,.0f} img/s = {c / turns:.2f}x the bound of its stages taking "
            f"turns ({turns:,.0f}: prep_sink {p:,.0f}, network alone {net:,.0f}), {c / net:.2f}x the network alone; "
            f"the preprocessing adds {added:.1f} us/image of GPU time beside the network's {1e6 / net:.1f} "
            f"({PACE_GOAL}x the network alone allows {allowed:.1f})"
        )
    return lines


def _tuning_and_networks(rows: list[dict]) -> list[str]:
    lines = []
    for r in rows:
        if r["kind"] == "fused_tune":
            where = "" if setting_of(r) == "default" else f" ({setting_of(r)})"
            lines.append(
                f"- {r['config']}{where} at {r['images_per_request']} img/request c={r['concurrency']}: "
                f"{r['images_per_s']:,.0f} img/s, p50 {r['p50_ms']:.2f} ms; server {r.get('composing', '')}"
            )
    for b in (1, 8, 64, 256):
        cls = [r for r in rows if r["kind"] == "classifier" and r.get("batch") == b]
        torch = [r for r in rows if r["kind"] == "torch_ceiling" and r.get("batch") == b and "graph" in r["config"]]
        if cls:
            top = max(cls, key=lambda r: r["images_per_s"])
            tail = ""
            if torch:
                ratio = top["images_per_s"] / torch[0]["images_per_s"]
                tail = f"; PyTorch CUDA-graph ceiling {torch[0]['images_per_s']:,} img/s -> **{ratio:.2f}x**"
            lines.append(
                f"- classifier alone b{b}: {top['images_per_s']:,} img/s, {top['latency_ms']:.2f} ms "
                f"({top['config']}){tail}"
            )
    return lines


def summary_lines(rows: list[dict], summary: dict) -> list[str]:
    """The goals of the preprocessing and classify issues, each as measured in this run (its first setting)."""
    settings = settings_measured(rows)
    first = settings[0]["label"] if settings else "default"
    mine = [r for r in rows if r.get("kind") != "triton" or setting_of(r) == first]
    where = "" if len(settings) < 2 else f", setting: {first}"
    lines = _preprocessing(mine, summary, dali_rate(rows, summary))
    lines += _classify(mine)
    lines += _tuning_and_networks(rows)
    for k, v in summary.items():
        if k.startswith("soak_") and isinstance(v, list) and v:
            vals = [x[1] if isinstance(x, (list, tuple)) else x for x in v]
            lines.append(f"- {k}: min {min(vals):,.0f}, max {max(vals):,.0f} over {len(vals)} samples")
    return ["", f"## Summary (500x375 q90 JPEGs, gRPC, same run{where})", "", *lines] if lines else []
