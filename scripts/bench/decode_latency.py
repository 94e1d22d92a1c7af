"""One image's decode latency on the GPU by nvImageCodec backend: the call and the wait for its GPU work.

``python -m scripts.bench.decode_latency --out rows.json`` decodes 500x375 q90 photos (the harness's) one at a
time, ``--calls`` times, with a decoder object of each backend (the hardware decoder, nvJPEG's CUDA decoder, the
hybrid CPU/GPU decoder) and prints the p50 of the host call and of the call plus the stream's
synchronize. It is the c=1 question "which decoder answers one image soonest", not a throughput measurement.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import time
from pathlib import Path

log = logging.getLogger("decode_latency")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="JSON rows")
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--backends", default="hw_gpu_only,gpu_only,hybrid_cpu_gpu")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    import cupy as cp

    from tritonprep.decode.nvimgcodec import import_nvimgcodec, make_decoder
    from tritonprep_testkit.photos import make_jpegs

    nv = import_nvimgcodec()
    jpegs = make_jpegs(500, 375, 8)  # the harness's 500x375 q90 photos
    params = nv.DecodeParams(apply_exif_orientation=True, color_spec=nv.ColorSpec.SRGB, allow_any_depth=False)
    stream = cp.cuda.Stream(non_blocking=True)
    rows = []
    for name in args.backends.split(","):
        kinds = (getattr(nv.BackendKind, name.upper()),)
        decoder = make_decoder(nv, 0, kinds, ":fancy_upsampling=1", 1)
        for calls in (20, args.calls):  # the first round warms the decoder up
            host, total = [], []
            for i in range(calls):
                code = nv.CodeStream(jpegs[i % len(jpegs)])
                t0 = time.perf_counter()
                img = decoder.decode([code], params=params, cuda_stream=stream.ptr)[0]
                t1 = time.perf_counter()
                stream.synchronize()
                t2 = time.perf_counter()
                if img is None:
                    raise SystemExit(f"{name}: did not decode the photo")
                host.append(t1 - t0)
                total.append(t2 - t0)
        row = {
            "backend": name,
            "calls": args.calls,
            "call_p50_ms": round(statistics.median(host) * 1e3, 3),
            "with_sync_p50_ms": round(statistics.median(total) * 1e3, 3),
            "with_sync_p90_ms": round(sorted(total)[int(0.9 * len(total))] * 1e3, 3),
        }
        log.info(json.dumps(row))
        rows.append(row)
        del decoder
    args.out.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
