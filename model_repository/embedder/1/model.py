"""Triton Python-backend model `embedder`: EfficientNet-Lite0's L2-normalised pooled features.

Thin by design: `model.onnx` from this version folder (scripts/export_embedder.py; on a GPU its FP16
variant, `model.fp16.nhwc.onnx` for the GPU config's channel-last input, with batch buckets 8,64) on the best
runtime installed, returning unit
vectors in the dtype its config's `embedding` output declares, lives in the `tritonprep` library
(tritonprep.pipeline.networks.EmbedderModel).
"""

import triton_python_backend_utils as pb_utils

from tritonprep.errors import PreprocessError
from tritonprep.pipeline.networks import EmbedderModel
from tritonprep.triton.stub import finalize_instance


class TritonPythonModel:
    def initialize(self, args):
        try:
            self.model = EmbedderModel(args)
        except PreprocessError as e:
            raise pb_utils.TritonModelException(f"embedder: {e}") from e

    def execute(self, requests):
        return self.model.execute(requests)

    def finalize(self):
        finalize_instance(self.model.close)
