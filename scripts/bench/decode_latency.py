"""One image's time on the GPU path, layer by layer: which part of a lone image's preprocessing costs what.

``python -m scripts.bench.decode_latency --out rows.json`` decodes 500x375 q90 photos (the harness's) one at a
time, ``--calls`` times a row, in one process, and prints each row's p50 of the host call and of the call plus the
wait for its GPU work (``--gap-ms`` asleep before each call, as a server at c=1 is between requests):

* ``raw <backend>``: an nvImageCodec decoder object of one backend (the hardware decoder, the hybrid CPU/GPU
  decoder), decoding on a stream of its own;
* ``raw hw, shipped options``: the hardware decoder with the shipped options (preallocation);
* ``raw hw, shipped options, reused images``: the same, decoding into the last call's output images;
* ``GpuDecoder``: tritonprep's staged decoder (its own streams joined to the caller's by events);
* ``GpuExecutor``: the whole preprocessing of the shipped ``preprocess`` GPU config, PIXELS only (checks, decode,
  the resize kernel, the wait), with its own steps' host time.

It answers "where does a lone image's time go below Triton", not a throughput question. With ``--mps`` the rows
run in a child process that is the client of a private MPS daemon (the launcher's :class:`MpsDaemon`, quit after
it), as every process of a server under ``--mps on`` is: the rows then say what MPS adds to each layer.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import logging
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

log = logging.getLogger("decode_latency")


def _timed(name: str, call: Callable[[bytes], Any], sync: Callable[[], None], jpegs: list[bytes], calls: int,
           gap_s: float) -> dict[str, Any]:  # fmt: skip
    """p50s of ``call`` (host) and of ``call`` + ``sync`` over ``calls`` calls, after a warm-up."""
    host, total = [], []
    for i in range(20 + calls):
        if gap_s:
            time.sleep(gap_s)
        data = jpegs[i % len(jpegs)]
        t0 = time.perf_counter()
        call(data)
        t1 = time.perf_counter()
        sync()
        t2 = time.perf_counter()
        if i >= 20:
            host.append(t1 - t0)
            total.append(t2 - t0)
    total.sort()
    row = {
        "row": name,
        "calls": calls,
        "gap_ms": gap_s * 1e3,
        "call_p50_ms": round(statistics.median(host) * 1e3, 3),
        "with_wait_p50_ms": round(statistics.median(total) * 1e3, 3),
        "with_wait_p90_ms": round(total[int(0.9 * len(total))] * 1e3, 3),
    }
    log.info(json.dumps(row))
    return row


def _time_parts(executor: Any, steps: dict[str, list[float]]) -> Callable[[], None]:
    """Time the executor's own parts (its checks, the decoder's call, the resize kernel's launch) in ``steps``; returns
    what undoes the one module-level patch (the kernel's launcher)."""
    import tritonprep.kernels.launch as launch

    def timing(name: str, call: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*a: Any, **kw: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return call(*a, **kw)
            finally:
                steps.setdefault(name, []).append(time.perf_counter() - t0)

        return timed

    executor._check = timing("check_s", executor._check)
    if executor.decoder is not None:  # None: no GPU decoder here, Pillow decodes
        executor.decoder.decode = timing("decoder_call_s", executor.decoder.decode)
        executor.decoder.release = timing("decoder_release_s", executor.decoder.release)
    original = launch.resize_normalize
    launch.resize_normalize = timing("kernel_launch_s", original)
    try:
        executor.stream.synchronize = timing("synchronize_s", executor.stream.synchronize)
    except AttributeError:  # a CuPy stream without an instance dict: total_s - the rest says it
        log.info("the stream's synchronize is not timed on its own")

    def restore() -> None:
        launch.resize_normalize = original

    return restore


def _rows_at(gap: float, args: argparse.Namespace, nv: Any, cp: Any, jpegs: list[bytes], params: Any) -> list[dict]:
    """Every row, ``gap`` seconds asleep before each call."""
    from scripts.bench.gpu_time import make_executor
    from tritonprep.decode.nvimgcodec import GpuDecoder, decoder_options, make_decoder
    from tritonprep.spec import DecoderOptions

    stream = cp.cuda.Stream(non_blocking=True)
    common, hw_options = decoder_options(DecoderOptions())
    rows = []

    def raw(decoder: Any, reuse: list[Any] | None = None) -> Callable[[bytes], Any]:
        def call(data: bytes) -> Any:
            images = decoder.decode([nv.CodeStream(data)], params=params, cuda_stream=stream.ptr,
                                    **({"images": reuse} if reuse else {}))  # fmt: skip
            if reuse is not None:
                reuse[:] = images
            return images

        return call

    for name in args.backends.split(","):
        decoder = make_decoder(nv, 0, (getattr(nv.BackendKind, name.upper()),), common, 1)
        rows.append(_timed(f"raw {name}", raw(decoder), stream.synchronize, jpegs, args.calls, gap))
        del decoder
    decoder = make_decoder(nv, 0, (nv.BackendKind.HW_GPU_ONLY,), hw_options, 1)
    rows.append(_timed("raw hw, shipped options", raw(decoder), stream.synchronize, jpegs, args.calls, gap))
    kept: list[Any] = []
    rows.append(_timed("raw hw, shipped options, reused images", raw(decoder, kept), stream.synchronize, jpegs,
                       args.calls, gap))  # fmt: skip
    del decoder, kept
    staged = GpuDecoder(0, stream, DecoderOptions())

    def staged_call(data: bytes) -> Any:
        staged.release()
        return staged.decode([data], [True])

    rows.append(_timed("GpuDecoder", staged_call, stream.synchronize, jpegs, args.calls, gap))
    staged.close()
    executor = make_executor()
    steps: dict[str, list[float]] = {}
    restore = _time_parts(executor, steps)

    def executor_call(data: bytes) -> Any:
        result = executor.run([data])
        for key, value in result.timings.items():
            steps.setdefault(key, []).append(value)
        return result

    row = _timed("GpuExecutor", executor_call, lambda: None, jpegs, args.calls, gap)
    # each part once a call: the last ``calls`` values are the timed calls' (the warm-up's come first)
    row["steps_p50_ms"] = {k: round(statistics.median(v[-args.calls :]) * 1e3, 3) for k, v in steps.items()}
    log.info("GpuExecutor steps: %s", row["steps_p50_ms"])
    if args.profile:
        profiler = cProfile.Profile()
        profiler.enable()
        _timed("GpuExecutor, profiled", executor_call, lambda: None, jpegs, args.calls, gap)
        profiler.disable()
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(25)
        with args.profile.open("a") as f:
            f.write(
                f"## GpuExecutor, {gap * 1e3:.1f} ms asleep before each call, {args.calls} calls\n{text.getvalue()}\n"
            )
    rows.append(row)
    restore()
    executor.close()
    stream.synchronize()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="JSON rows")
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--gaps-ms", default="0,3", help="comma list: asleep before each call, ms")
    parser.add_argument("--backends", default="hw_gpu_only,hybrid_cpu_gpu")
    parser.add_argument("--profile", type=Path, help="also cProfile the GpuExecutor row's calls into this file")
    parser.add_argument("--mps", action="store_true", help="run the rows as the client of a private MPS daemon")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.mps:
        sys.exit(_under_mps([a for a in sys.argv[1:] if a != "--mps"], args.out))

    import cupy as cp

    from tritonprep.decode.nvimgcodec import import_nvimgcodec
    from tritonprep_testkit.photos import make_jpegs

    nv = import_nvimgcodec()
    jpegs = make_jpegs(500, 375, 8)  # the harness's 500x375 q90 photos
    params = nv.DecodeParams(apply_exif_orientation=True, color_spec=nv.ColorSpec.SRGB, allow_any_depth=False)
    rows = []
    for gap in (float(g) / 1e3 for g in args.gaps_ms.split(",")):
        rows += _rows_at(gap, args, nv, cp, jpegs, params)
    args.out.write_text(json.dumps(rows, indent=1) + "\n")


def _under_mps(argv: list[str], out: Path) -> int:
    """This bench without ``--mps`` in a child process under a private MPS daemon (started first, quit after the
    child is gone, whatever happened); each row of ``out`` then says ``"mps": true``. The child's exit code, or 2
    where no daemon could start (the reason logged)."""
    from tritonprep.errors import ServerError
    from tritonprep.launcher.mps import MpsDaemon

    with tempfile.TemporaryDirectory(prefix="tp-mps-", dir="/tmp") as work:  # short: the daemon's socket paths
        daemon = MpsDaemon(Path(work), os.environ)
        try:
            daemon.start()
        except ServerError as e:
            log.error("--mps: no MPS daemon could start: %s", e)
            return 2
        try:
            log.info("MPS daemon %s started; the rows run as its client", daemon.pid)
            env = daemon.client_env(os.environ)
            code = subprocess.run([sys.executable, "-m", "scripts.bench.decode_latency", *argv], env=env).returncode
        finally:
            log.info("MPS daemon: %s", daemon.quit())
    if code == 0:
        rows = json.loads(out.read_text())
        out.write_text(json.dumps([{**row, "mps": True} for row in rows], indent=1) + "\n")
    return code


if __name__ == "__main__":
    main()
