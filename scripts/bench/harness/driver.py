"""The harness's command line: :func:`build_parser` (its options) and :func:`main` (the phases in order, each
phase's one-process part once, then its served part once per server setting; the report rewritten after each
phase)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path

from scripts.perf_sweep import PerfAnalyzerUnavailable, find_perf_analyzer
from tritonprep.errors import ServerError

from .phases import PHASES
from .report import write_report
from .run import PLANS, Run
from .settings import (
    OptionError,
    check_launcher_supports,
    parse_instances,
    parse_percentages,
    parse_preprocess_config,
    parse_settings,
    parse_skip,
    parse_tune_grid,
)

log = logging.getLogger("harness")

#: what ``--skip`` may name: parts of the phases
SKIPPABLE = {
    "ceiling": "main: the decode ceiling grid",
    "dali": "main: the DALI sweep; classify: DALI feeding ONNX Runtime",
    "inprocess": "main: tritonprep's executor in process",
    "cpu": "main: the CPU executor's server",
    "sizes": "main: the larger image sizes of --plan full",
    "classifier": "classify: the classifier alone",
    "torch": "classify: the PyTorch ceiling",
    "load": "startstop: the load on the first start",
    "null": "tune: the null_sink ceiling beside each configuration; classify: null_classify (no preprocessing work)",
    "servers": "every phase: the served part (only the one-process parts run)",
}


def build_parser() -> argparse.ArgumentParser:
    """The harness's options (also read by the docs' tests)."""
    from . import __doc__ as package_doc

    parser = argparse.ArgumentParser(
        prog="python -m scripts.bench.harness",
        description=(package_doc or "").split("\n\n")[0],
        epilog="--skip parts: " + "; ".join(f"{k} ({v})" for k, v in SKIPPABLE.items()),
    )
    parser.add_argument("--out", type=Path, required=True, help="folder of results.md, results.csv, summary.json")
    parser.add_argument("--plan", choices=sorted(PLANS), default="quick")
    parser.add_argument("--phase", default="main", help=f"comma list of: {', '.join(PHASES)}")
    parser.add_argument("--skip", default="", help=f"comma list of: {', '.join(SKIPPABLE)}")
    parser.add_argument(
        "--config", help="main phase: instances,queue_delay_us,hw_decoders instead of the shipped config"
    )
    parser.add_argument("--interval", type=int, help="perf_analyzer measurement interval, ms")
    parser.add_argument(
        "--points",
        choices=("all", "goals"),
        default="all",
        help="main and classify phases: every point, or only those the goals read (prep_sink at 8 and 32 "
        "images/request; classify and classify_fused at c=1, 8 at c=64, 32)",
    )
    parser.add_argument("--soak-seconds", type=int, default=300)
    parser.add_argument("--fused-instances", default="2,3,4", help="fused phase: classify_fused instance counts")
    parser.add_argument("--torch-python", help="a Python with CUDA PyTorch for the network ceiling")
    parser.add_argument(
        "--dali-args",
        default="",
        help='main phase: more scripts.bench.dali_bench options for the DALI sweep, e.g. "--batch 128 --threads 4" '
        '(to shorten it) or "--prefetch 1,2"',
    )
    parser.add_argument(
        "--mps",
        help="comma list of auto, on, off: every served phase runs once per value, back to back (the servers' "
        "ServerOptions.mps); default: the launcher's default, one run",
    )
    parser.add_argument(
        "--gpu-memory-budget",
        help="comma list of sizes (16G, 12000M, 16GiB), auto or off: every served phase runs once per value "
        "(ServerOptions.gpu_memory_budget; with --mps, once per combination); default: the launcher's",
    )
    parser.add_argument(
        "--instances",
        default="",
        help='instances phase: instance counts per model, e.g. "preprocess=2,4;classifier=1,2;postprocess=1,4;'
        'classify_fused=2,4" (every combination is served); default: the shipped counts',
    )
    parser.add_argument(
        "--instance-models",
        default="classify,classify_fused",
        help="instances phase: the models measured on each combination (comma list of classify, classify_fused, "
        "prep_sink, null_classify, embed; embed adds the embedder to the copy, and embedder:KEY to "
        "--classifier-parameter)",
    )
    parser.add_argument(
        "--classifier-batching",
        default="shipped",
        help="instances phase: the classifier's preferred batch sizes, comma list of shipped, none, delayN (kept, the "
        "batcher waiting up to N us to fill one) (another axis)",
    )
    parser.add_argument(
        "--classifier-turns",
        default="shipped",
        help="instances phase: the classifier's network_turns, comma list of shipped, off (another axis)",
    )
    parser.add_argument(
        "--classifier-parameter",
        default="",
        help="instances phase: KEY=shipped,VALUE,... one more parameter of the classifier's configs, e.g. "
        "fuse_conv_bias=shipped,true or batch_buckets=shipped,1+64 (+ for a value's own commas, empty for the empty "
        "string; another axis); "
        "MODEL:KEY for another model's, e.g. preprocess:hw_decoder=shipped,false (any preprocess parameter; any of "
        "the classifier's runtime and MPS parameters, e.g. mps_client_priority=shipped,1, declared or not)",
    )
    parser.add_argument(
        "--mps-threads",
        default="",
        help="instances phase: CUDA_MPS_ACTIVE_THREAD_PERCENTAGE values for the server, e.g. 100,50 (another axis; "
        "only read under MPS)",
    )
    parser.add_argument(
        "--tune-grid",
        default="",
        help='tune phase: preprocess configurations INSTANCES,QUEUE_DELAY_US,HW_DECODERS, e.g. "2,0,2;4,0,1" '
        "(default: the phase's own grid)",
    )
    parser.add_argument("--starts", type=int, default=3, help="startstop phase: starts of the default repository")
    parser.add_argument(
        "--gpu-counts",
        default="",
        help="gpus phase: comma list of GPU counts to serve on, e.g. 1,2,4 (default: 1, 2, 4, ... up to every GPU); "
        "overload phase: the counts to sweep (default: 1)",
    )
    parser.add_argument(
        "--latency-requests", type=int, default=1000, help="latency phase: timed c=1 requests per model"
    )
    parser.add_argument(
        "--gpu-time",
        type=Path,
        help="latency phase: scripts.bench.gpu_time's JSON lines (STEPS=gputime), for the report's kernel table",
    )
    return parser


def needs_perf_analyzer(args: argparse.Namespace) -> bool:
    """Whether the phases asked for measure through Triton (everything served but an unloaded startstop)."""
    if "servers" in args.skip:
        return False
    return any(p != "startstop" for p in args.phases) or "load" not in args.skip


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The options, checked: unknown phases or parts, bad values and settings the launcher lacks are errors."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        args.phases = [p for p in (v.strip() for v in args.phase.split(",")) if p]
        unknown = [p for p in args.phases if p not in PHASES]
        if unknown:
            raise OptionError(f"--phase: unknown phase(s) {unknown}; known: {', '.join(PHASES)}")
        args.skip = parse_skip(args.skip, SKIPPABLE)
        args.settings = parse_settings(args.mps, args.gpu_memory_budget)
        check_launcher_supports(args.settings)
        parse_instances(args.instances)
        parse_percentages(args.mps_threads)
        args.tune_grid = parse_tune_grid(args.tune_grid)
        args.config = parse_preprocess_config(args.config) if args.config else None
        if args.starts < 1:
            raise OptionError("--starts must be 1 or more")
        if args.latency_requests < 1:
            raise OptionError("--latency-requests must be 1 or more")
        if needs_perf_analyzer(args):
            try:
                find_perf_analyzer()
            except PerfAnalyzerUnavailable as e:
                raise OptionError(
                    f"{e}; without it only --skip servers (and phase startstop with --skip load) can run"
                ) from None
    except OptionError as e:
        parser.error(str(e))
    return args


def run_phase(run: Run, args: argparse.Namespace, name: str) -> None:
    """One phase: its one-process part, then its served part per setting; a server that does not start is an
    error of that setting only (logged, in the report), the others still run."""
    phase = PHASES[name]
    if phase.once is not None:
        phase.once(run, args)
    if "servers" in args.skip:
        return
    for setting in run.settings:
        try:
            phase.served(run, args, setting)
        except ServerError as e:
            message = f"phase {name} ({setting.label}): {str(e).splitlines()[0]}"
            log.error("%s", message)
            run.summary.setdefault("errors", []).append(message)
            run.save()


def main(argv: list[str] | None = None) -> int:
    """Run the phases; 0 when done (figures that missed a goal do not fail it)."""
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    os.environ["TRITONPREP_PROFILE"] = "1"  # per-phase timings of every model instance in the server logs
    args.out.mkdir(parents=True, exist_ok=True)
    run = Run(args.out, PLANS[args.plan], args.interval, args.settings)
    for name in args.phases:
        t0 = time.monotonic()
        run_phase(run, args, name)
        seconds = round(time.monotonic() - t0)
        run.summary.setdefault("phase_seconds", {})[name] = seconds
        run.save()
        log.info("phase %s done in %d s", name, seconds)
        write_report(run.rows, run.summary, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
