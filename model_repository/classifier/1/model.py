"""Triton Python-backend model `classifier` (embedded mode): EfficientNet-Lite0 on the best runtime.

Runs `model.onnx` (or its FP16 variant `model.fp16.onnx`) from this version folder on TensorRT,
ONNX Runtime's CUDA EP (a session per batch bucket, CUDA graphs) or ONNX Runtime on the CPU
(tritonprep.classifier.runtimes, which documents the config parameters). The container mode serves
the same network with Triton's `tensorrt_plan` backend instead (configs/tensorrt.pbtxt).
"""

import logging
from pathlib import Path

import triton_python_backend_utils as pb_utils

from tritonprep.classifier.runtimes import RuntimeOptions, load_runtime
from tritonprep.errors import PreprocessError
from tritonprep.triton.isolation import RequestIsolation, row_batched
from tritonprep.triton.pb import model_config, parameters, teardown_logging
from tritonprep.triton.tensors import input_array, output_tensor, placement, to_numpy

log = logging.getLogger("tritonprep.classifier")


class TritonPythonModel:
    def initialize(self, args):
        config = model_config(args)
        max_batch = int(config["max_batch_size"])
        try:
            self.runtime = load_runtime(
                Path(args["model_repository"]) / args["model_version"] / "model.onnx",
                tuple(int(d) for d in config["input"][0]["dims"]),
                options=RuntimeOptions.from_parameters(parameters(config), max_batch),
                device_id=int(args["model_instance_device_id"]),
                use_gpu=args["model_instance_kind"] == "GPU",
                max_batch=max_batch,
            )
        except PreprocessError as e:
            raise pb_utils.TritonModelException(f"classifier: {e}") from e
        log.info("classifier instance %s: runtime %s", args["model_instance_name"], self.runtime.name)
        self.placement_logged = False
        self.requests = RequestIsolation(args["model_name"], self.read, [row_batched(self.run)], self.respond)

    def execute(self, requests):
        return self.requests.execute(requests)

    def read(self, request):
        x = input_array(request, "input")
        if not self.placement_logged:
            log.info("classifier: first batch input on the %s, runtime %s", placement(x), self.runtime.name)
            self.placement_logged = True
        return x

    def run(self, inputs):
        # The logits leave on the host (4 KB an image, one copy per batch): the CPU postprocess reads
        # them from shared memory instead of Triton fetching a GPU tensor per request.
        return (to_numpy(self.runtime.infer_many(inputs)),)

    def respond(self, outputs):
        return [output_tensor("logits", outputs[0])]

    def finalize(self):
        # the sessions, their CUDA graphs and buffers go now, in order, not at interpreter exit
        try:
            self.runtime.close()
        finally:
            teardown_logging()
