"""What the first call of a GPU step costs for each new batch size, with CuPy's kernel cache empty (a fresh
machine): each way of running the step in a fresh process with its own empty ``CUPY_CACHE_DIR``, called on
``--batches`` in turn, each batch size twice (the first call compiles what it needs, the second shows the run).

Steps (``--steps``):

* ``embed_cupy``: the embedder's unit-length step written in CuPy (norm, maximum, division: the way it ran before
  stage 22; FP16 features are cast first), into FP32 vectors;
* ``embed_kernel``: the same step as :func:`tritonprep.kernels.launch.unit_rows` (one kernel).

``--dtype`` is the features' dtype: ``float32`` is what the served embedder's network answers (its FP16 variants keep
FP32 outputs), ``float16`` a network that answers FP16. One JSON row per (step, dtype, batch, call): milliseconds,
synchronized.

    python -m scripts.bench.first_calls --out FILE [--batches 1,7,64] [--steps embed_cupy,embed_kernel]
        [--dtype float32,float16]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

log = logging.getLogger("first_calls")

STEPS = ("embed_cupy", "embed_kernel")
FEATURES = 1280


def _step(name: str) -> Any:
    """The callable of step ``name``: features (CuPy, FP16) to vectors (FP32)."""
    import numpy as np

    from tritonprep.classifier.embedding import _unit
    from tritonprep.cuda import import_cupy

    cp = import_cupy()
    if name == "embed_cupy":
        return lambda x: _unit(cp, x).astype(np.float32, copy=False)
    from tritonprep.kernels.launch import unit_rows

    return lambda x: unit_rows(x, np.dtype(np.float32))


def child(step: str, batches: list[int], dtype: str) -> list[dict[str, Any]]:
    """Run in the fresh process: each batch size's first and second call of ``step`` on ``dtype`` features."""
    import numpy as np

    from tritonprep.cuda import import_cupy

    cp = import_cupy()
    cp.cuda.Device(0).use()
    fn = _step(step)
    rows = []
    for batch in batches:
        x = cp.asarray(np.random.default_rng(batch).standard_normal((batch, FEATURES)).astype(dtype))
        cp.cuda.get_current_stream().synchronize()
        for call in (1, 2):
            t0 = time.perf_counter()
            fn(x)
            cp.cuda.get_current_stream().synchronize()
            ms = round((time.perf_counter() - t0) * 1e3, 3)
            rows.append({"step": step, "dtype": dtype, "batch": batch, "call": call, "ms": ms})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--batches", default="1,7,64")
    parser.add_argument("--steps", default=",".join(STEPS))
    parser.add_argument("--dtype", default="float32", help="the features' dtypes, a comma list of float32, float16")
    parser.add_argument("--child", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    batches = [int(b) for b in args.batches.split(",")]
    steps, dtypes = args.steps.split(","), args.dtype.split(",")
    if args.child:
        args.out.write_text("".join(json.dumps(r) + "\n" for r in child(args.child, batches, dtypes[0])))
        return 0
    for step in steps:
        if step not in STEPS:
            parser.error(f"--steps: {step!r} is not one of {', '.join(STEPS)}")
    for dtype in dtypes:
        if dtype not in ("float32", "float16"):
            parser.error(f"--dtype: {dtype!r} is not float32 or float16")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    rows: list[dict[str, Any]] = []
    for dtype in dtypes:
        for step in steps:
            with tempfile.TemporaryDirectory() as cache, tempfile.NamedTemporaryFile(suffix=".jsonl") as part:
                env = {**os.environ, "CUPY_CACHE_DIR": cache}
                cmd = [sys.executable, "-m", "scripts.bench.first_calls", "--child", step, "--batches", args.batches,
                       "--dtype", dtype, "--out", part.name]  # fmt: skip
                subprocess.run(cmd, env=env, check=True, timeout=600)
                new = [json.loads(line) for line in Path(part.name).read_text().splitlines()]
            for r in new:
                log.info("%-13s %s batch %-3d call %d: %9.3f ms", r["step"], dtype, r["batch"], r["call"], r["ms"])
            rows += new
    args.out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
