"""Triton Python-backend model `classifier` (embedded mode): EfficientNet-Lite0 on the best runtime.

Runs `model.onnx` from this version folder on TensorRT, ONNX Runtime GPU or ONNX Runtime
CPU (tritonprep.classifier.runtimes). The container mode serves the same network with Triton's
`tensorrt_plan` backend instead (configs/tensorrt.pbtxt).
"""

import logging
from pathlib import Path

import triton_python_backend_utils as pb_utils

from tritonprep.classifier.runtimes import load_runtime
from tritonprep.errors import PreprocessError
from tritonprep.triton.pb import model_config, parameters
from tritonprep.triton.responses import batched_responses
from tritonprep.triton.tensors import concat, input_array, output_tensor, placement

log = logging.getLogger("tritonprep.classifier")


class TritonPythonModel:
    def initialize(self, args):
        config = model_config(args)
        onnx_path = Path(args["model_repository"]) / args["model_version"] / "model.onnx"
        try:
            self.runtime = load_runtime(
                onnx_path,
                tuple(int(d) for d in config["input"][0]["dims"]),
                prefer=parameters(config).get("runtime", "auto"),
                device_id=int(args["model_instance_device_id"]),
                use_gpu=args["model_instance_kind"] == "GPU",
                max_batch=int(config["max_batch_size"]),
            )
        except PreprocessError as e:
            raise pb_utils.TritonModelException(f"classifier: {e}") from e
        log.info("classifier instance %s: runtime %s", args["model_instance_name"], self.runtime.name)
        self.placement_logged = False

    def execute(self, requests):
        return batched_responses(requests, self.read, self.run, self.respond, what="classifier")

    def read(self, request):
        x = input_array(request, "input")
        if not self.placement_logged:
            log.info("classifier: first batch input on the %s", placement(x))
            self.placement_logged = True
        return x

    def run(self, inputs):
        return (self.runtime.infer(concat(inputs)),)

    def respond(self, outputs):
        return [output_tensor("logits", outputs[0])]
