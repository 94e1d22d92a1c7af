"""Triton Python-backend model `classifier` (embedded mode): EfficientNet-Lite0 on the best runtime.

Runs `model.onnx` (or its FP16 variant `model.fp16.onnx`) from this version folder on TensorRT,
ONNX Runtime's CUDA EP (a session per batch bucket, CUDA graphs) or ONNX Runtime on the CPU
(tritonprep.classifier.runtimes, which documents the config parameters), and answers what each
request asks for: `logits`, and the top-k predictions SCORES, CLASS_IDS and LABELS
(tritonprep.classifier.postprocess.TopK, computed where the logits are: on the GPU for a GPU runtime),
so that the `classify` and `analyze` ensembles need no postprocess step. The container mode serves
the network with Triton's `tensorrt_plan` backend instead (configs/tensorrt.pbtxt), which answers
logits only: its ensembles keep the `postprocess` step (classify/configs/tensorrt.pbtxt).
"""

import logging
from dataclasses import dataclass
from pathlib import Path

import triton_python_backend_utils as pb_utils

from tritonprep.classifier.postprocess import OUTPUTS as TOP_K_OUTPUTS
from tritonprep.classifier.postprocess import TopK
from tritonprep.classifier.runtimes import RuntimeOptions, load_runtime
from tritonprep.errors import PreprocessError
from tritonprep.triton.health import report_loaded
from tritonprep.triton.isolation import RequestIsolation
from tritonprep.triton.pb import model_config, output_dims, parameters, teardown_logging
from tritonprep.triton.tensors import input_array, named_tensors, placement, requested_outputs, to_numpy

log = logging.getLogger("tritonprep.classifier")

LOGITS = "logits"


@dataclass(frozen=True)
class NetworkInput:
    """A request's images and the outputs it asked for."""

    x: object
    wanted: frozenset

    def __len__(self):
        return len(self.x)


class TritonPythonModel:
    def initialize(self, args):
        config = model_config(args)
        max_batch = int(config["max_batch_size"])
        dims = output_dims(config)
        try:
            # the top-k outputs where the config declares them (k from their dims)
            self.top_k = TopK.from_output_dims(dims) if any(name in dims for name in TOP_K_OUTPUTS) else None
            options = RuntimeOptions.from_parameters(parameters(config), max_batch)
            self.runtime = load_runtime(
                Path(args["model_repository"]) / args["model_version"] / "model.onnx",
                tuple(int(d) for d in config["input"][0]["dims"]),
                options=options,
                device_id=int(args["model_instance_device_id"]),
                use_gpu=args["model_instance_kind"] == "GPU",
                max_batch=max_batch,
            )
        except PreprocessError as e:
            raise pb_utils.TritonModelException(f"classifier: {e}") from e
        self.offered = [name for name in dims if name == LOGITS or (self.top_k and name in TOP_K_OUTPUTS)]
        log.info(
            "classifier instance %s: runtime %s, outputs %s",
            args["model_instance_name"],
            self.runtime.name,
            ", ".join(self.offered),
        )
        report_loaded(
            args,
            runtime=self.runtime.name,
            buckets=options.batch_buckets if self.runtime.on_gpu else (),
            gpu_memory_mb=options.gpu_memory_mb or None,
            timings=self.runtime.timings,
        )
        self.placement_logged = False
        self.requests = RequestIsolation(args["model_name"], self.read, [self.run], self.respond)

    def execute(self, requests):
        return self.requests.execute(requests)

    def read(self, request):
        x = input_array(request, "input")
        if not self.placement_logged:
            log.info("classifier: first batch input on the %s, runtime %s", placement(x), self.runtime.name)
            self.placement_logged = True
        return NetworkInput(x, requested_outputs(request, self.offered))

    def run(self, inputs):
        """The network over every request's images at once, then only the outputs some request asked for:
        the top-k where the logits are (a few bytes an image leave the GPU), the logits copied to the host."""
        logits = self.runtime.infer_many([i.x for i in inputs])
        wanted = frozenset().union(*(i.wanted for i in inputs))
        top = self.top_k(logits) if self.top_k is not None and wanted & set(TOP_K_OUTPUTS) else None
        host = to_numpy(logits) if LOGITS in wanted else None
        results, start = [], 0
        for i in inputs:
            stop = start + len(i)
            outputs = {}
            if top is not None and i.wanted & set(TOP_K_OUTPUTS):
                rows = self.top_k.outputs(top[0][start:stop], top[1][start:stop])
                outputs.update((name, rows[name]) for name in TOP_K_OUTPUTS if name in i.wanted)
            if host is not None and LOGITS in i.wanted:
                outputs[LOGITS] = host[start:stop]
            results.append(outputs)
            start = stop
        return results

    def respond(self, outputs):
        return named_tensors(outputs)

    def finalize(self):
        # the sessions, their CUDA graphs and buffers go now, in order, not at interpreter exit
        try:
            self.runtime.close()
        finally:
            teardown_logging()
