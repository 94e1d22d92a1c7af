"""Triton Python-backend model `postprocess`: logits to top-k scores, class ids and names.

The top-k and its outputs (SCORES, CLASS_IDS, LABELS; k from their dims, the names from the
`labels` parameter) are tritonprep.classifier.postprocess.TopK, which classify_fused answers with too.
"""

from pathlib import Path

import triton_python_backend_utils as pb_utils

from tritonprep.classifier.postprocess import TopK
from tritonprep.errors import PreprocessError
from tritonprep.triton.isolation import RequestIsolation, row_batched
from tritonprep.triton.pb import model_config
from tritonprep.triton.stub import finalize_instance
from tritonprep.triton.tensors import concat, input_array, named_tensors, to_numpy


class TritonPythonModel:
    def initialize(self, args):
        try:
            config = model_config(args)
            self.top_k = TopK.from_config(config, Path(args["model_repository"]), classes_of="LOGITS")
        except PreprocessError as e:
            raise pb_utils.TritonModelException(f"{args['model_name']}: {e}") from e
        self.requests = RequestIsolation(args["model_name"], self.read, [row_batched(self.run)], self.respond)

    def execute(self, requests):
        return self.requests.execute(requests)

    def read(self, request):
        return to_numpy(input_array(request, "LOGITS"))

    def run(self, logits):
        return self.top_k(concat(logits))

    def respond(self, rows):
        return named_tensors(self.top_k.outputs(*rows))

    def finalize(self):
        finalize_instance()
