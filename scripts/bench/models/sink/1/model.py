"""Benchmark sink: one reduction per image over the preprocess output, where it lives."""

import logging

from tritonprep import triton_glue as glue


class TritonPythonModel:
    def initialize(self, args):
        glue.model_config(args)
        self.placement = None

    def execute(self, requests):
        inputs = [glue.input_array(r, "PIXELS") for r in requests]
        if self.placement is None:
            self.placement = glue.placement(inputs[0])
            logging.getLogger("tritonprep.sink").info("sink: first batch arrived on the %s", self.placement)
        batch = glue.concat(inputs)
        sums = batch.reshape(len(batch), -1).sum(axis=1, keepdims=True).astype("float32")
        sums = glue.to_numpy(sums)
        responses, start = [], 0
        for x in inputs:
            responses.append(glue.response([glue.output_tensor("CHECKSUM", sums[start : start + len(x)])]))
            start += len(x)
        return responses
