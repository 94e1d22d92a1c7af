"""Triton Python-backend model `postprocess`: logits to top-k scores, class ids and names."""

import numpy as np
import triton_python_backend_utils as pb_utils

from tritonprep import triton_glue as glue
from tritonprep.postprocess import imagenet_labels, top_k


class TritonPythonModel:
    def initialize(self, args):
        config = glue.model_config(args)
        dims = {o["name"]: o["dims"] for o in config["output"]}
        self.k = int(dims["SCORES"][0])
        if any(int(d[0]) != self.k for d in dims.values()):
            raise pb_utils.TritonModelException("postprocess: SCORES, CLASS_IDS and LABELS must have the same dims [k]")
        self.labels = imagenet_labels()

    def execute(self, requests):
        inputs = [glue.to_numpy(glue.input_array(r, "LOGITS")) for r in requests]
        scores, ids = top_k(glue.concat(inputs), self.k)
        ids = ids.astype(np.int32)
        responses, start = [], 0
        for x in inputs:
            s, i = scores[start : start + len(x)], ids[start : start + len(x)]
            names = [[self.labels[c] for c in row] for row in i]
            responses.append(
                glue.response([glue.output_tensor("SCORES", s), glue.output_tensor("CLASS_IDS", i), glue.bytes_tensor("LABELS", names)])
            )
            start += len(x)
        return responses
