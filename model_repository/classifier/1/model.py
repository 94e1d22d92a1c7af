"""Triton Python-backend model `classifier` (embedded mode): EfficientNet-Lite0 on the best runtime.

Runs `model.onnx` from this version folder on TensorRT, ONNX Runtime GPU or ONNX Runtime
CPU (tritonprep.runtimes). The container mode serves the same network with Triton's
`tensorrt_plan` backend instead (configs/tensorrt.pbtxt).
"""

import logging
from pathlib import Path

import triton_python_backend_utils as pb_utils

from tritonprep import triton_glue as glue
from tritonprep.errors import PreprocessError
from tritonprep.runtimes import load_runtime

log = logging.getLogger("tritonprep.classifier")


class TritonPythonModel:
    def initialize(self, args):
        config = glue.model_config(args)
        onnx_path = Path(args["model_repository"]) / args["model_version"] / "model.onnx"
        try:
            self.runtime = load_runtime(
                onnx_path,
                prefer=glue.parameters(config).get("runtime", "auto"),
                device_id=int(args["model_instance_device_id"]),
                use_gpu=args["model_instance_kind"] == "GPU",
                max_batch=int(config["max_batch_size"]),
            )
        except PreprocessError as e:
            raise pb_utils.TritonModelException(f"classifier: {e}") from e
        log.info("classifier instance %s: runtime %s", args["model_instance_name"], self.runtime.name)
        self.placement_logged = False

    def execute(self, requests):
        inputs = [glue.input_array(r, "input") for r in requests]
        if not self.placement_logged:
            log.info("classifier: first batch input on the %s", glue.placement(inputs[0]))
            self.placement_logged = True
        logits = self.runtime.infer(glue.concat(inputs))
        responses, start = [], 0
        for x in inputs:
            responses.append(glue.response([glue.output_tensor("logits", logits[start : start + len(x)])]))
            start += len(x)
        return responses
