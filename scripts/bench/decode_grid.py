"""Where the GPU decode's throughput goes: nvImageCodec settings measured side by side on one GPU.

Each row decodes the same 500x375 q90 JPEGs in a loop for ``--seconds`` and reports images/s:

* ``ceiling``: N raw hardware decoders on N threads, each on its own CUDA stream, batch 128, with and
  without preallocation and with 1 or nvImageCodec's default host threads per decoder (:func:`ceiling_grid`;
  the ceiling is its best 6-decoder row);
* ``decoder``: tritonprep's :class:`~tritonprep.decode.nvimgcodec.GpuDecoder` with one of its
  :class:`~tritonprep.spec.DecoderOptions` changed at a time (decoder objects, host threads per decoder,
  preallocation, fancy upsampling, batch per call);
* ``processes``: P processes at once, each with its own decoder, as P Triton instances would run;
* ``executor``: the whole GPU executor (checks, decode, kernel, sync) and where its host time goes.

    python -m scripts.bench.decode_grid --out grid.json [--seconds 1.5]
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing as mp
import queue
import sys
import threading
import time
from pathlib import Path
from typing import Any

log = logging.getLogger("decode_grid")

#: (label, DecoderOptions fields); the first is the decoder as shipped before this work. Every row decodes
#: with each decoder object on a CUDA stream of its own (the only mode since the caller's-stream mode was
#: removed: grids measured before that ran these rows on the caller's stream, and had "own stream(s)"
#: rows beside them).
SETTINGS: list[tuple[str, dict[str, Any]]] = [
    (
        "old: 1 hw decoder, default threads, no prealloc",
        {"hw_decoders": 1, "hw_decoder_threads": 0, "cuda_decoder_threads": 0, "hw_decoder_prealloc": (1, 1, 1)},
    ),
    ("1 hw decoder, 1 thread", {"hw_decoders": 1, "hw_decoder_threads": 1, "hw_decoder_prealloc": (1, 1, 1)}),
    ("1 hw decoder, 1 thread, prealloc", {"hw_decoders": 1, "hw_decoder_threads": 1}),
    ("2 hw decoders, 1 thread, prealloc", {"hw_decoders": 2, "hw_decoder_threads": 1}),
    ("3 hw decoders, 1 thread, prealloc", {"hw_decoders": 3, "hw_decoder_threads": 1}),
    ("6 hw decoders, 1 thread, prealloc", {"hw_decoders": 6, "hw_decoder_threads": 1}),
    ("2 hw decoders, 2 threads, prealloc", {"hw_decoders": 2, "hw_decoder_threads": 2}),
    (
        "2 hw decoders, 1 thread, prealloc, no fancy upsampling",
        {"hw_decoders": 2, "hw_decoder_threads": 1, "fancy_upsampling": False},
    ),
    (
        "2 hw decoders, 1 thread, prealloc, hw share 0.85",
        {"hw_decoders": 2, "hw_decoder_threads": 1, "hw_decoder_share": 0.85},
    ),
]
#: the SETTINGS also run as several processes at once (as several Triton instances would)
PROCESS_SETTINGS = (
    "old: 1 hw decoder, default threads, no prealloc",
    "1 hw decoder, 1 thread",
    "2 hw decoders, 1 thread, prealloc",
)
#: ceiling_grid's variants: (max_num_cpu_threads per decoder, preallocation); the first is the old ceiling
CEILING_VARIANTS: tuple[tuple[int, bool], ...] = ((1, False), (1, True), (0, True))
CEILING_DECODERS = (1, 3, 6)


def _images(count: int = 256) -> list[bytes]:
    from tritonprep_testkit.photos import make_jpegs

    return make_jpegs(500, 375, count, seed=42)


def _loop(decode: Any, sync: Any, batches: list[list[bytes]], seconds: float) -> float:
    """images/s of ``decode(batch); sync()`` cycling through ``batches`` for ``seconds``."""
    decode(batches[0])
    sync()
    n, k, t0 = 0, 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        batch = batches[k % len(batches)]
        decode(batch)
        sync()
        n += len(batch)
        k += 1
    return n / (time.perf_counter() - t0)


def _batches(images: list[bytes], size: int) -> list[list[bytes]]:
    return [images[i : i + size] for i in range(0, len(images) - size + 1, size)] or [images[:size]]


def ceiling(decoders: int, seconds: float, batch: int = 128, threads: int = 1, prealloc: bool = False) -> float:
    """N raw nvImageCodec hardware decoders, each on its own thread and stream; summed images/s.

    ``threads`` is each decoder's ``max_num_cpu_threads`` (0: nvImageCodec's default, cores - 1);
    ``prealloc`` adds the preallocation options GpuDecoder passes (1024x768, batch = ``batch``) to
    nvImageCodec's default options (``:fancy_upsampling=0``, what the old ceiling ran with).
    """
    import cupy as cp
    from nvidia import nvimgcodec as nv

    params = nv.DecodeParams(apply_exif_orientation=True, color_spec=nv.ColorSpec.SRGB)
    images = _images()
    options = ":fancy_upsampling=0"  # the binding's default: the old ceiling passed no options
    if prealloc:
        options += (
            " nvjpeg_hw_decoder:preallocate_width_hint=1024 nvjpeg_hw_decoder:preallocate_height_hint=768"
            f" nvjpeg_hw_decoder:preallocate_batch_size={batch}"
        )
    workers = []
    for _ in range(decoders):
        stream = cp.cuda.Stream(non_blocking=True)
        dec = nv.Decoder(
            device_id=0,
            max_num_cpu_threads=threads,
            backends=[nv.Backend(nv.BackendKind.HW_GPU_ONLY)],
            options=options,
        )
        workers.append((dec, stream))
    batches = _batches(images, batch)
    rates = [0.0] * decoders

    def work(k: int) -> None:
        dec, stream = workers[k]
        rates[k] = _loop(
            lambda b: dec.decode([nv.CodeStream(x) for x in b], params=params, cuda_stream=stream.ptr),
            stream.synchronize,
            batches,
            seconds,
        )

    runners = [threading.Thread(target=work, args=(k,)) for k in range(decoders)]
    for t in runners:
        t.start()
    for t in runners:
        t.join()
    return sum(rates)


def ceiling_grid(seconds: float, batch: int = 128) -> list[dict[str, Any]]:
    """:func:`ceiling` for 1, 3 and 6 decoders in each of ``CEILING_VARIANTS``, each in a fresh process.

    Returns one row per measurement: ``decoders``, ``threads`` (0: nvImageCodec's default), ``prealloc``,
    ``batch``, ``images_per_s``. The (1 thread, no preallocation) rows are the ceiling as measured
    before; preallocation alone lifted one GpuDecoder above that old 1-decoder figure, so it was not
    the best nvImageCodec can do. **The decode ceiling is the best 6-decoder row** (:func:`ceiling_best`).
    9 rows of ``seconds`` each (plus a process start and a warm-up batch per row).
    """
    rows = []
    for threads, prealloc in CEILING_VARIANTS:
        for n in CEILING_DECODERS:
            row: dict[str, Any] = {"decoders": n, "threads": threads, "prealloc": prealloc, "batch": batch}
            try:
                row["images_per_s"] = isolated(ceiling, n, seconds, batch, threads, prealloc)
            except RuntimeError as e:  # one setting's crash must not cost the others
                log.warning("ceiling %s failed: %s", ceiling_label(row), e)
                row.update(images_per_s=0.0, error=str(e))
            rows.append(row)
            log.info("ceiling %s: %.0f img/s", ceiling_label(row), row["images_per_s"])
    return rows


def ceiling_best(rows: list[dict[str, Any]], decoders: int = 6) -> dict[str, Any] | None:
    """The ceiling: the fastest of ``rows`` (from :func:`ceiling_grid`) with ``decoders`` decoders."""
    cands = [r for r in rows if r["decoders"] == decoders and not r.get("error")]
    return max(cands, key=lambda r: r["images_per_s"]) if cands else None


def ceiling_label(row: dict[str, Any]) -> str:
    """``6 decoders, 1 thread each, prealloc`` for a ceiling_grid row."""
    threads = "default threads (cores - 1)" if row["threads"] == 0 else f"{row['threads']} thread(s) each"
    return f"{row['decoders']} decoder(s), {threads}, {'prealloc' if row['prealloc'] else 'no prealloc'}"


def decoder_rates(kwargs: dict[str, Any], batches: tuple[int, ...], seconds: float) -> list[float]:
    """tritonprep's GpuDecoder with the DecoderOptions ``kwargs`` at each per-call batch size (one decoder set
    for all)."""
    from tritonprep.cuda import import_cupy
    from tritonprep.decode.nvimgcodec import GpuDecoder
    from tritonprep.spec import DecoderOptions

    images = _images()
    stream = import_cupy().cuda.Stream(non_blocking=True)
    dec = GpuDecoder(0, stream, DecoderOptions(**kwargs))
    try:
        return [_loop(dec.decode, stream.synchronize, _batches(images, b), seconds) for b in batches]
    finally:
        dec.close()


def _child(fn: Any, args: tuple[Any, ...], out: Any) -> None:
    try:
        out.put(("ok", fn(*args)))
    except Exception as e:  # noqa: BLE001 - reported to the parent, which raises it instead of waiting
        out.put(("error", f"{type(e).__name__}: {e}"))


def isolated(fn: Any, *args: Any, timeout: float = 300) -> Any:
    """``fn(*args)`` in a fresh process: every setting gets its own few decoders (many in one process crashed).

    Raises RuntimeError when ``fn`` raised, or when the process died (a crash in nvImageCodec) or ran past
    ``timeout`` without a result, instead of waiting out the whole timeout for a dead process.
    """
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    p = ctx.Process(target=_child, args=(fn, args, out))
    p.start()
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                status, value = out.get(timeout=1.0)
                break
            except queue.Empty:
                if p.is_alive() and time.monotonic() < deadline:
                    continue
                try:  # it may have put its result just before it ended
                    status, value = out.get(timeout=1.0)
                    break
                except queue.Empty:
                    why = f"exit code {p.exitcode}" if not p.is_alive() else f"no result in {timeout:.0f} s"
                    raise RuntimeError(f"{getattr(fn, '__name__', fn)}{args} in its own process: {why}") from None
    finally:
        p.join(30)
        if p.is_alive():
            p.kill()
            p.join(5)
    if status != "ok":
        raise RuntimeError(f"{getattr(fn, '__name__', fn)}{args}: {value}")
    return value


def _process_worker(kwargs: dict[str, Any], batch: int, seconds: float, start: Any, out: Any) -> None:
    images = _images(128)
    from tritonprep.cuda import import_cupy
    from tritonprep.decode.nvimgcodec import GpuDecoder
    from tritonprep.spec import DecoderOptions

    stream = import_cupy().cuda.Stream(non_blocking=True)
    dec = GpuDecoder(0, stream, DecoderOptions(**kwargs))
    dec.decode(images[:batch])
    stream.synchronize()
    start.wait()
    out.put(_loop(dec.decode, stream.synchronize, _batches(images, batch), seconds))


def processes_rate(kwargs: dict[str, Any], procs: int, batch: int, seconds: float) -> float:
    """``procs`` processes decoding at once (as that many Triton instances would); summed images/s."""
    ctx = mp.get_context("spawn")
    start, out = ctx.Barrier(procs), ctx.Queue()
    ps = [ctx.Process(target=_process_worker, args=(kwargs, batch, seconds, start, out)) for _ in range(procs)]
    for p in ps:
        p.start()
    rates = [out.get(timeout=120) for _ in ps]
    for p in ps:
        p.join(30)
    return sum(rates)


def executor_profile(batch: int, seconds: float) -> dict[str, float]:
    """The GPU executor end to end at ``batch``, and the host time of its parts per image."""
    from tritonprep.decode import validate
    from tritonprep.executors.gpu import GpuExecutor
    from tritonprep.geometry import plan_resize
    from tritonprep.spec import OutputSpec, PreprocessConfig

    images = _images()
    spec = OutputSpec()
    with GpuExecutor(spec, 0) as ex:
        rate = _loop(ex.run, lambda: None, _batches(images, batch), seconds)
        t0 = time.perf_counter()
        for data in images:
            validate(data, PreprocessConfig.single(spec).limits)
        check_us = (time.perf_counter() - t0) / len(images) * 1e6
        t0 = time.perf_counter()
        for _ in range(len(images)):
            plan_resize(spec, 500, 375)
        plan_us = (time.perf_counter() - t0) / len(images) * 1e6
        timings: dict[str, float] = {}
        for _ in range(20):
            for k, v in ex.run(images[:batch]).timings.items():
                timings[k] = timings.get(k, 0.0) + v / 20
    return {
        "images_per_s": rate,
        "check_us_per_image": check_us,
        "plan_us_per_image": plan_us,
        **{f"{k}_ms": v * 1e3 for k, v in timings.items()},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="JSON rows")
    parser.add_argument("--seconds", type=float, default=1.5)
    parser.add_argument("--skip", default="", help="comma list of: ceiling,decoder,processes,executor")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    skip = set(filter(None, args.skip.split(",")))
    rows: list[dict[str, Any]] = []

    def add(kind: str, label: str, batch: int, rate: float, **extra: Any) -> None:
        rows.append({"kind": kind, "setting": label, "batch": batch, "images_per_s": round(rate), **extra})
        log.info("%-10s %-60s batch %3d: %8.0f img/s %s", kind, label, batch, rate, extra or "")
        args.out.write_text(json.dumps(rows, indent=1))

    if "ceiling" not in skip:
        for row in ceiling_grid(args.seconds):
            add(
                "ceiling",
                f"{row['decoders']} raw hardware decoder(s) on threads, threads {row['threads']}, "
                f"prealloc {row['prealloc']}",
                row["batch"],
                row["images_per_s"],
                decoders=row["decoders"],
                threads=row["threads"],
                prealloc=row["prealloc"],
                **({"error": row["error"]} if row.get("error") else {}),
            )
    if "decoder" not in skip:
        batches = (16, 64, 128)
        for label, kwargs in SETTINGS:
            try:
                rates = isolated(decoder_rates, kwargs, batches, args.seconds)
            except RuntimeError as e:  # e.g. a crash with many decoder objects: the other settings still run
                add("decoder", label, 0, 0.0, error=str(e))
                continue
            for batch, rate in zip(batches, rates):
                add("decoder", label, batch, rate)
    if "processes" not in skip:
        for label, kwargs in [(label, kwargs) for label, kwargs in SETTINGS if label in PROCESS_SETTINGS]:
            for procs, batch in ((4, 16), (4, 32), (6, 16)):
                add(
                    "processes",
                    f"{procs} processes x ({label})",
                    batch,
                    processes_rate(kwargs, procs, batch, args.seconds),
                )
    if "executor" not in skip:
        for batch in (8, 16, 64):
            prof = isolated(executor_profile, batch, args.seconds)
            add("executor", "GpuExecutor.run (shipped spec)", batch, prof.pop("images_per_s"), **prof)
    sys.stdout.write(json.dumps(rows) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
