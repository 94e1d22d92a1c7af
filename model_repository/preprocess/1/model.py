"""Triton Python-backend model `preprocess`: encoded images in, network input tensor out.

Thin by design: the spec, decoders, executors, metrics and the one-response-per-request
rules live in the `tritonprep` library (tritonprep.triton.preprocess.PreprocessModel).
"""

import triton_python_backend_utils as pb_utils

from tritonprep.errors import PreprocessError
from tritonprep.triton.preprocess import PreprocessModel
from tritonprep.triton.stub import finalize_instance


class TritonPythonModel:
    def initialize(self, args):
        try:
            self.model = PreprocessModel(args, input_name="IMAGE")
        except PreprocessError as e:
            raise pb_utils.TritonModelException(f"preprocess: {e}") from e

    def execute(self, requests):
        return self.model.execute(requests)

    def finalize(self):
        finalize_instance(self.model.close)
