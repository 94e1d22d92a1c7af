"""Phase ``classify``: the whole job, JPEG in, predictions out.

Once per run (one process each): the classifier alone (ONNX Runtime CUDA EP variants, the FP16 NHWC ones
with and without ``fuse_conv_bias``, and the channel-last FP16 network the GPU config serves beside the FP16 one fed
FP16 NCHW: ``scripts.bench.classifier_bench ort``; the goals read the best at batch 64), the network ceiling in PyTorch
(``--torch-python``) and the pipeline a user would hand-roll (DALI feeding the same ONNX Runtime runtime). Per
server setting: the ``classify`` ensemble and the one-process ``classify_fused`` side by side on one server, point
by point, at 1, 8 and 32 images/request (``--points goals``: the points the goals read), and beside them
``null_classify`` (``--skip null`` leaves it out): the same ensemble with a preprocessing that does no work
(``null_prep``'s four GPU instances, idle while the others are measured, are in that server's memory). Against
``classify`` it shows what the preprocessing's work beside the network costs; against the classifier alone, what
serving the network through Triton costs.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from tritonprep.network_files import nhwc_variant

from ..external import run_json_lines
from ..repos import HERE, NULL_CLASSIFY_MODELS, SOURCE, make_repo
from ..run import Run
from ..settings import Setting

log = logging.getLogger(__name__)

#: (images per request, concurrencies) of classify and classify_fused, measured side by side
CLASSIFY_POINTS = [(1, [1]), (1, [16, 64]), (8, [16, 64]), (32, [8, 16])]
#: ``--points goals``: only what the goals read (c=1, 8 images/request at c=64, 32 at c=8 and 16)
GOAL_POINTS = [(1, [1]), (8, [64]), (32, [8, 16])]


#: the classifier the GPU config serves (FP16, channel-last input; ``make model``)
SERVED_NETWORK = nhwc_variant(SOURCE / "classifier" / "1" / "model.onnx")


def _classifier_bench(*args: str) -> list[str]:
    return [sys.executable, "-m", "scripts.bench.classifier_bench", *args, "--out", "{out}"]


def once(run: Run, args: argparse.Namespace) -> None:
    """The classifier alone, PyTorch's ceiling, DALI feeding ONNX Runtime."""
    if "classifier" not in args.skip:
        served = ["--nhwc-input", str(SERVED_NETWORK)] if SERVED_NETWORK.is_file() else []
        if not served:
            log.warning("%s is missing (make model): the classifier alone is measured without it", SERVED_NETWORK)
        run.add_rows(run_json_lines(_classifier_bench("ort", "--fuse-conv-bias", "0,1", *served)))
    if args.torch_python and "torch" not in args.skip:
        run.add_rows(run_json_lines([args.torch_python, str(HERE / "torch_ceiling.py")],
                                    env={"PYTHONPATH": os.environ.get("TORCH_EXTRA_PATH", "")}))  # fmt: skip
    if "dali" not in args.skip:
        run.add_rows(run_json_lines([*_classifier_bench("dali"), "--images", str(run.folders["500x375"])]))


def served(run: Run, args: argparse.Namespace, setting: Setting) -> None:
    """classify, classify_fused and null_classify at every point, on one server."""
    null = "null" not in args.skip
    repo = make_repo(run.work / "repo-classify", with_classify=True, sinks=NULL_CLASSIFY_MODELS if null else ())
    with run.serve("classify", repo, setting) as srv:
        run.summary["classifier_runtime"] = srv.log_lines("classifier instance", 1)
        for n, conc in GOAL_POINTS if args.points == "goals" else CLASSIFY_POINTS:
            for model in ("classify", "classify_fused", *(["null_classify"] if null else [])):
                run.sweep(model, srv, model, [n], conc)
        run.summary["classify_log"] = srv.log_lines("classifier", 6)
