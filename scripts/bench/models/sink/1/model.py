"""Benchmark sink, standing in for the network: takes the preprocess output where it lives.

By default it does no work on the pixels (the minimal stand-in: the network would read them on
the GPU); with parameter ``checksum`` = "true" it reduces each image to one number, which
the tests use to check that the data arrived intact.
"""

import logging
import time

import numpy as np

from tritonprep import triton_glue as glue
from tritonprep.profiling import PhaseTimer


class TritonPythonModel:
    def initialize(self, args):
        config = glue.model_config(args)
        self.checksum = glue.parameters(config).get("checksum", "false") == "true"
        self.placement = None
        self.timer = PhaseTimer(args["model_instance_name"])

    def execute(self, requests):
        t0 = time.perf_counter()
        inputs = [glue.input_array(r, "PIXELS") for r in requests]
        if self.placement is None:
            self.placement = glue.placement(inputs[0])
            logging.getLogger("tritonprep.sink").info("sink: first batch arrived on the %s", self.placement)
        if self.checksum:
            batch = glue.concat(inputs)
            sums = glue.to_numpy(batch.reshape(len(batch), -1).sum(axis=1, keepdims=True).astype("float32"))
        else:
            sums = np.zeros((sum(len(x) for x in inputs), 1), np.float32)
        responses, start = [], 0
        for x in inputs:
            responses.append(glue.response([glue.output_tensor("CHECKSUM", sums[start : start + len(x)])]))
            start += len(x)
        self.timer.record(len(requests), len(sums), total=time.perf_counter() - t0)
        return responses
