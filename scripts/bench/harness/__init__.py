"""Side-by-side benchmark on one GPU machine, in one run, on the same images.

Phases (``--phase``, several with commas; every phase adds rows to OUT/rows.json and the report is
rewritten from all rows after each; a later call with the same ``--out`` adds to them). Each phase's
one-process parts run once; its served parts run once per server setting (``--mps on,off``,
``--gpu-memory-budget 16G,off``: every combination, back to back), each server measured (launch to
ready, stop, exit code, GPU memory sampled throughout):

* ``tune``: preprocess configurations (instances, queue delay, hardware decoders per instance) through
  Triton, each with the null ceiling beside it, at 1 and 8 images/request (:mod:`.phases.tune`);
* ``main``: the preprocessing against its ceilings and its peer: ``prep_sink`` and ``null_sink`` through
  Triton at 1, 8, 32 and 64 images/request; once: DALI's sweep, tritonprep's executor in process and the
  decode ceiling (:mod:`.phases.main`);
* ``classify``: the whole job, ``classify`` and ``classify_fused`` side by side on one server at 1, 8 and
  32 images/request; once: the classifier alone, PyTorch's ceiling (``--torch-python``), DALI feeding
  ONNX Runtime (:mod:`.phases.classify`);
* ``fused``: ``classify_fused`` with each instance count of ``--fused-instances`` (:mod:`.phases.fused`);
* ``instances``: instance counts per model (``--instances``) and MPS thread percentages
  (``--mps-threads``), classify and classify_fused at 8 and 32 images/request and at c=1 (:mod:`.phases.instances`);
* ``analyze``: decode once, serve two models (:mod:`.phases.analyze`);
* ``soak``: constant load on ``prep_sink`` for ``--soak-seconds`` (:mod:`.phases.soak`);
* ``startstop``: the default repository started ``--starts`` times: launch to ready, start-up breakdown,
  memory at ready and under load, stop time, exit code (:mod:`.phases.startstop`);
* ``gpus``: the GPU-count axis: the shipped repository on 1, 2, 4, ... GPUs (``--gpu-counts``), classify,
  classify_fused and embed at 8 and 32 images/request and at c=1, with the load generator's CPU and each
  GPU's utilization (:mod:`.phases.gpus`).
* ``overload``: the shipped repository as shipped, ``classify`` closed-loop at 1, 2, 4 and 8 times its saturating
  concurrency at 8 and 32 images/request: answered, refused, other errors, p99, the log's E and W lines
  (:mod:`.phases.overload`).
* ``latency``: where one image's time goes at c=1 (``classify``, ``classify_fused``, ``prep_sink``: the client's
  round trip, Triton's statistics per model version, each instance's own phases; ``--latency-requests``), then the
  same models at 8 and 32 images/request with the GPU sampled by ``nvidia-smi dmon`` (SMs, memory, the JPEG
  engines); once: the kernel table of ``--gpu-time`` (scripts.bench.gpu_time's output) (:mod:`.phases.latency`).

``--points goals`` measures, in ``main`` and ``classify``, only the points the goals read (cheaper runs of
several settings). Writes results.md (with the settings side by side and the goals, met or not),
results.csv and summary.json into --out and prints the report.

    python -m scripts.bench.harness --out /tmp/bench --phase main,classify [--plan quick|full] [--mps on,off]
"""

from __future__ import annotations

from .driver import build_parser, main

__all__ = ["build_parser", "main"]
