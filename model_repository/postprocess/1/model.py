"""Triton Python-backend model `postprocess`: logits to top-k scores, class ids and names.

Thin by design: the top-k and its outputs (SCORES, CLASS_IDS, LABELS; k from their dims, the names from the
`labels` parameter) live in the `tritonprep` library (tritonprep.pipeline.networks.PostprocessModel, on the
same TopK that classify_fused answers with).
"""

import triton_python_backend_utils as pb_utils

from tritonprep.errors import PreprocessError
from tritonprep.pipeline.networks import PostprocessModel
from tritonprep.triton.stub import finalize_instance


class TritonPythonModel:
    def initialize(self, args):
        try:
            self.model = PostprocessModel(args)
        except PreprocessError as e:
            raise pb_utils.TritonModelException(f"{args['model_name']}: {e}") from e

    def execute(self, requests):
        return self.model.execute(requests)

    def finalize(self):
        finalize_instance(self.model.close)
