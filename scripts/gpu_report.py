#!/usr/bin/env python3
"""GPU fidelity and throughput report (issue: GPU engine). Run on a machine with a GPU.

Sections, each against the CPU reference (Pillow / libjpeg-turbo, the CPU executor):
  1. resize: the fused kernel vs Pillow's antialiased resize on identical pixels, per photo
     and scale: % of values within +-1 (uint8 scale) and max |diff|;
  2. decode: nvImageCodec (hardware decoder, CUDA decoder; fancy upsampling on/off) vs Pillow:
     mean and max |diff|;
  3. end to end: EfficientNet-Lite0 (ONNX Runtime) on GPU-preprocessed vs CPU-preprocessed
     tensors: top-1 identical? max |delta probability|;
  4. throughput on 500x375 q90 JPEGs: nvImageCodec decode alone, the kernel alone, and the
     whole GPU executor (decode + kernel + sync), at batch 64 and 256.

    python -m scripts.gpu_report --out report.md [--onnx model_repository/classifier/1/model.onnx]
"""

from __future__ import annotations

import argparse
import datetime
import io
import logging
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
from PIL import Image

from tritonprep_testkit import photos as bench_images
from tritonprep_testkit.compare import agreement, mean_abs_diff
from tritonprep_testkit.servers import ONNX

log = logging.getLogger("gpu_report")


def agreement_pct(a: np.ndarray, b: np.ndarray) -> tuple[float, float, int]:
    """(% of values within 1, mean |a - b|, max |a - b|)."""
    within, worst = agreement(a, b)
    return within * 100, mean_abs_diff(a, b), worst


def environment(cp) -> list[str]:
    props = cp.cuda.runtime.getDeviceProperties(0)
    name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    from tritonprep.decode.nvimgcodec import import_nvimgcodec
    from tritonprep.errors import RuntimeUnavailable

    try:
        nv_version = getattr(import_nvimgcodec(), "__version__", "?")
    except RuntimeUnavailable:
        nv_version = "not installed"
    import PIL

    return [
        f"- date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}",
        f"- commit: {os.environ.get('GIT_COMMIT', 'unknown')}",
        f"- GPU: {name} (sm_{props['major']}{props['minor']}, {props['multiProcessorCount']} SMs), "
        f"driver CUDA {cp.cuda.runtime.driverGetVersion()}, runtime {cp.cuda.runtime.runtimeGetVersion()}",
        f"- host: {platform.node()} {os.cpu_count()} CPUs, Python {platform.python_version()}",
        f"- numpy {np.__version__}, CuPy {cp.__version__}, Pillow {PIL.__version__}, nvImageCodec {nv_version}",
    ]


def resize_section(cp, photos: dict[str, np.ndarray]) -> list[str]:
    from tritonprep.executors.cpu import normalize_window, resize_pil
    from tritonprep.executors.resize import resize_into
    from tritonprep.geometry import plan_resize
    from tritonprep.spec import OutputSpec

    lines = [
        "## 1. Resize: fused kernel vs Pillow (same uint8 pixels)",
        "",
        "| filter | rule | photo | source | resized to | factor | within ±1 | max abs diff |",
        "|---|---|---|---|---|---|---|---|",
    ]
    stream = cp.cuda.Stream(non_blocking=True)
    configs = [
        (f, s, {"resize_shorter": s, "output_height": min(224, s), "output_width": min(224, s)})
        for f in ("bilinear", "bicubic")
        for s in (64, 128, 256, 512, 1024)
    ]
    configs += [
        (f, "stretch", {"resize": "stretch", "output_height": 300, "output_width": 500})
        for f in ("bilinear", "bicubic")
    ]
    worst = 100.0
    for interp, label, kw in configs:
        spec = OutputSpec(interpolation=interp, mean=(0, 0, 0), std=(1, 1, 1), **kw)
        arrays = list(photos.values())
        with stream:
            dev = [cp.asarray(a) for a in arrays]
            srcs = {
                i: (d.data.ptr, a.shape[1], a.shape[0], a.shape[1] * 3) for i, (d, a) in enumerate(zip(dev, arrays))
            }
            plans = [plan_resize(spec, a.shape[1], a.shape[0]) for a in arrays]
            out = cp.empty((len(arrays),) + spec.output_shape, np.float32)
            resize_into(spec, srcs, out, stream)
            stream.synchronize()
            got = out.get()
        for (name, arr), g, plan in zip(photos.items(), got, plans):
            pixels, ox, oy = resize_pil(spec, Image.fromarray(arr))
            within, _, mx = agreement_pct(g, normalize_window(spec, pixels, ox, oy))
            worst = min(worst, within)
            factor = arr.shape[1] / plan.resized_w
            rule = f"shorter side {label}" if label != "stretch" else "stretch 500x300"
            lines.append(
                f"| {interp} | {rule} | {name} | {arr.shape[1]}x{arr.shape[0]} | {plan.resized_w}x{plan.resized_h} "
                f"| {factor:.2f}x {'down' if factor > 1 else 'up'} | {within:.4f} % | {mx} |"
            )
    lines += ["", f"Lowest share within ±1: **{worst:.4f} %** (bar: ≥ 99.9 %).", ""]
    return lines


def decode_section(cp, nv, photos: dict[str, np.ndarray]) -> list[str]:
    lines = [
        "## 2. Decode: nvImageCodec vs Pillow (libjpeg-turbo), quality-90 JPEGs",
        "",
        "| decoder | fancy upsampling | image | decoded | mean abs diff | max abs diff | within ±1 |",
        "|---|---|---|---|---|---|---|",
    ]
    jpegs = {f"{k} {a.shape[1]}x{a.shape[0]}": bench_images_encode(a) for k, a in photos.items()}
    jpegs.update({f"500x375 #{i}": b for i, b in enumerate(bench_images.make_jpegs(500, 375, 3, seed=11))})
    ref = {k: np.asarray(Image.open(io.BytesIO(v)).convert("RGB")) for k, v in jpegs.items()}
    stream = cp.cuda.Stream(non_blocking=True)
    for kind in ("HW_GPU_ONLY", "GPU_ONLY"):
        for fancy in (False, True):
            try:
                dec = nv.Decoder(
                    device_id=0,
                    backends=[nv.Backend(getattr(nv.BackendKind, kind))],
                    options=":fancy_upsampling=1" if fancy else "",
                )
            except RuntimeError as e:
                lines.append(f"| {kind} | {fancy} | - | decoder unavailable: {e} | | | |")
                continue
            params = nv.DecodeParams(apply_exif_orientation=True, color_spec=nv.ColorSpec.SRGB)
            imgs = dec.decode([nv.CodeStream(v) for v in jpegs.values()], params=params, cuda_stream=stream.ptr)
            stream.synchronize()
            for (k, _), img in zip(jpegs.items(), imgs):
                if img is None:
                    lines.append(f"| {kind} | {fancy} | {k} | None (not decoded) | | | |")
                    continue
                got = cp.asarray(img).get()
                within, mean, mx = agreement_pct(got, ref[k])
                lines.append(f"| {kind} | {fancy} | {k} | yes | {mean:.3f} | {mx} | {within:.2f} % |")
    lines.append("")
    return lines


def bench_images_encode(arr: np.ndarray) -> bytes:
    return bench_images.encode(arr, "JPEG", quality=90, subsampling="4:2:0")


def end_to_end_section(cp, photos: dict[str, np.ndarray], onnx: Path) -> list[str]:
    import onnxruntime as ort

    from tritonprep.classifier.postprocess import imagenet_labels, softmax
    from tritonprep.executors.cpu import CpuExecutor
    from tritonprep.executors.gpu import GpuExecutor
    from tritonprep.spec import OutputSpec

    labels = imagenet_labels()
    spec = OutputSpec()  # the repository's preprocess config: Lite0 normalization
    images = {f"{k}.jpg": bench_images_encode(a) for k, a in photos.items()}
    images.update({f"{k}.png": _png(a) for k, a in list(photos.items())[:2]})
    images.update({f"500x375 #{i}.jpg": b for i, b in enumerate(bench_images.make_jpegs(500, 375, 8, seed=5))})
    session = ort.InferenceSession(str(onnx), providers=["CPUExecutionProvider"])
    with GpuExecutor(spec, 0) as ex:
        g = ex.run(list(images.values()))
    c = CpuExecutor(spec).run(list(images.values()))
    pg = softmax(session.run(["logits"], {"input": g.output.get()})[0])
    pc = softmax(session.run(["logits"], {"input": c.output})[0])
    lines = [
        "## 3. End to end: EfficientNet-Lite0 on GPU- vs CPU-preprocessed input",
        "",
        "| image | top-1 GPU path | top-1 CPU path | same | max abs delta p |",
        "|---|---|---|---|---|",
    ]
    same_all, worst = True, 0.0
    for k, a, b in zip(images, pg, pc):
        same = int(a.argmax()) == int(b.argmax())
        same_all &= same
        dp = float(np.abs(a - b).max())
        worst = max(worst, dp)
        lines.append(
            f"| {k} | {labels[a.argmax()]} ({a.max():.3f}) | {labels[b.argmax()]} ({b.max():.3f}) "
            f"| {'yes' if same else 'NO'} | {dp:.4f} |"
        )
    lines += [
        "",
        f"Top-1 identical on all {len(images)} images: **{'yes' if same_all else 'no'}**; "
        f"max |Δp| = **{worst:.4f}** (bar: ≤ 0.01).",
        "",
    ]
    return lines


def _png(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, "PNG")
    return buf.getvalue()


def timed(fn, reps: int) -> float:
    fn()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t0) / reps


def throughput_section(cp, nv) -> list[str]:
    from tritonprep.decode import validate
    from tritonprep.executors.gpu import GpuExecutor
    from tritonprep.executors.resize import resize_into
    from tritonprep.spec import OutputSpec, PreprocessConfig

    jpegs = bench_images.make_jpegs(500, 375, 256, seed=1)
    spec = OutputSpec()
    config = PreprocessConfig.single(spec)
    stream = cp.cuda.Stream(non_blocking=True)
    lines = [
        "## 4. Throughput, 500x375 q90 JPEGs (mean %.1f KB), one process, one stream" % (sum(map(len, jpegs)) / 256e3),
        "",
        "| stage | batch | ms per batch | images/s |",
        "|---|---|---|---|",
    ]
    for label, backends in (
        ("decode: nvImageCodec hardware decoder", ["HW_GPU_ONLY"]),
        ("decode: nvImageCodec CUDA/hybrid decoder", ["GPU_ONLY", "HYBRID_CPU_GPU"]),
    ):
        try:
            dec = nv.Decoder(device_id=0, backends=[nv.Backend(getattr(nv.BackendKind, b)) for b in backends])
        except RuntimeError as e:
            lines.append(f"| {label} | - | unavailable: {e} | |")
            continue
        params = nv.DecodeParams(apply_exif_orientation=True, color_spec=nv.ColorSpec.SRGB)
        for bs in (64, 256):
            batch = jpegs[:bs]

            def run(dec=dec, batch=batch, params=params) -> None:
                dec.decode([nv.CodeStream(b) for b in batch], params=params, cuda_stream=stream.ptr)
                stream.synchronize()

            t = timed(run, 10)
            lines.append(f"| {label} | {bs} | {t * 1e3:.2f} | {bs / t:,.0f} |")
    # kernel alone on decoded images
    from tritonprep.decode.nvimgcodec import GpuDecoder

    staged = GpuDecoder(0, stream)
    for bs in (64, 256):
        imgs = staged.decode(jpegs[:bs])
        srcs = {i: (im.ptr, im.width, im.height, im.pitch) for i, im in enumerate(imgs)}
        out = cp.empty((bs,) + spec.output_shape, np.float32)
        start, end = cp.cuda.Event(), cp.cuda.Event()
        resize_into(spec, srcs, out, stream)
        stream.synchronize()
        start.record(stream)
        for _ in range(50):
            resize_into(spec, srcs, out, stream)
        end.record(stream)
        end.synchronize()
        ms = cp.cuda.get_elapsed_time(start, end) / 50
        lines.append(
            f"| kernel: resize+crop+normalize (GPU time, incl. arg upload) | {bs} | {ms:.3f} | {bs / ms * 1e3:,.0f} |"
        )
    with GpuExecutor(spec, 0) as ex:
        for bs in (64, 256):
            t = timed(lambda bs=bs: ex.run(jpegs[:bs]), 10)
            lines.append(f"| GPU executor: checks + decode + kernel + sync | {bs} | {t * 1e3:.2f} | {bs / t:,.0f} |")
        t0 = time.perf_counter()
        for _ in range(10):
            for j in jpegs[:256]:
                validate(j, config.limits)
        lines.append(f"| (of which host header checks) | 256 | {(time.perf_counter() - t0) / 10 * 1e3:.2f} | |")
    from tritonprep.executors.cpu import CpuExecutor

    cpu = CpuExecutor(spec)
    t = timed(lambda: cpu.run(jpegs[:64]), 2)
    lines.append(f"| CPU executor ({config.resolved_cpu_threads} threads) | 64 | {t * 1e3:.2f} | {64 / t:,.0f} |")
    lines.append("")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--onnx", type=Path, default=ONNX)
    parser.add_argument("--sections", default="resize,decode,e2e,throughput")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    from tritonprep.cuda import import_cupy
    from tritonprep.decode.nvimgcodec import import_nvimgcodec

    cp, nv = import_cupy(), import_nvimgcodec()

    photos = bench_images.load_photos()
    lines = ["# tritonprep GPU engine: fidelity and throughput", "", *environment(cp), ""]
    sections = args.sections.split(",")
    for name, fn in (
        ("resize", lambda: resize_section(cp, photos)),
        ("decode", lambda: decode_section(cp, nv, photos)),
        ("e2e", lambda: end_to_end_section(cp, photos, args.onnx)),
        ("throughput", lambda: throughput_section(cp, nv)),
    ):
        if name in sections:
            t0 = time.perf_counter()
            lines += fn()
            log.info("section %s done in %.1f s", name, time.perf_counter() - t0)
            args.out.write_text("\n".join(lines) + "\n")
    sys.stdout.write("\n".join(lines) + "\n")  # the report is this script's output
    return 0


if __name__ == "__main__":
    sys.exit(main())
