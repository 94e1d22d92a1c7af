"""Triton Python-backend model `postprocess`: logits to top-k scores, class ids and names."""

import numpy as np
import triton_python_backend_utils as pb_utils

from tritonprep.classifier.postprocess import imagenet_labels, top_k
from tritonprep.triton.pb import model_config, output_dims
from tritonprep.triton.responses import batched_responses
from tritonprep.triton.tensors import bytes_tensor, concat, input_array, output_tensor, to_numpy


class TritonPythonModel:
    def initialize(self, args):
        dims = output_dims(model_config(args))
        self.k = dims["SCORES"][0]
        if any(d[0] != self.k for d in dims.values()):
            raise pb_utils.TritonModelException("postprocess: SCORES, CLASS_IDS and LABELS must have the same dims [k]")
        self.labels = imagenet_labels()

    def execute(self, requests):
        return batched_responses(requests, self.read, self.run, self.respond, what="postprocess")

    def read(self, request):
        return to_numpy(input_array(request, "LOGITS"))

    def run(self, logits):
        scores, ids = top_k(concat(logits), self.k)
        return scores, ids.astype(np.int32)

    def respond(self, outputs):
        scores, ids = outputs
        names = [[self.labels[c] for c in row] for row in ids]
        return [output_tensor("SCORES", scores), output_tensor("CLASS_IDS", ids), bytes_tensor("LABELS", names)]
