"""Triton Python-backend model `classify_fused`: raw images in, top-k predictions out, one process.

Thin by design: decode, preprocessing, the network and top-k live in the `tritonprep` library
(tritonprep.pipeline.fused.FusedClassifyModel).
"""

import triton_python_backend_utils as pb_utils

from tritonprep.errors import PreprocessError
from tritonprep.pipeline.fused import FusedClassifyModel
from tritonprep.triton.stub import finalize_instance


class TritonPythonModel:
    def initialize(self, args):
        try:
            self.model = FusedClassifyModel(args, input_name="IMAGE")
        except PreprocessError as e:
            raise pb_utils.TritonModelException(f"classify_fused: {e}") from e

    def execute(self, requests):
        return self.model.execute(requests)

    def finalize(self):
        finalize_instance(self.model.close)
