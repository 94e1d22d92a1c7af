"""Triton Python-backend model `classifier` (embedded mode): EfficientNet-Lite0 on the best runtime.

Thin by design: `model.onnx` (or its FP16 variant `model.fp16.onnx`, or with configs/gpu.pbtxt's channel-last
FP16 input `model.fp16.nhwc.onnx`) from this version folder on
TensorRT, ONNX Runtime's CUDA EP or ONNX Runtime on the CPU, answering `logits` and the top-k
predictions SCORES, CLASS_IDS and LABELS (computed where the logits are), lives in the `tritonprep`
library (tritonprep.pipeline.networks.ClassifierModel). The container mode serves the network with
Triton's `tensorrt_plan` backend instead (configs/tensorrt.pbtxt), which answers logits only: its
ensembles keep the `postprocess` step (classify/configs/tensorrt.pbtxt).
"""

import triton_python_backend_utils as pb_utils

from tritonprep.errors import PreprocessError
from tritonprep.pipeline.networks import ClassifierModel
from tritonprep.triton.stub import finalize_instance


class TritonPythonModel:
    def initialize(self, args):
        try:
            self.model = ClassifierModel(args)
        except PreprocessError as e:
            raise pb_utils.TritonModelException(f"classifier: {e}") from e

    def execute(self, requests):
        return self.model.execute(requests)

    def finalize(self):
        finalize_instance(self.model.close)
