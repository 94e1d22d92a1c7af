"""Benchmark sink, standing in for the network: takes the preprocess output where it lives.

By default it does no work on the pixels (the minimal stand-in: the network would read them on
the GPU); with parameter ``checksum`` = "true" it reduces each image to one number, which
the tests use to check that the data arrived intact.
"""

import logging

import numpy as np

from tritonprep.triton.isolation import RequestIsolation, row_batched
from tritonprep.triton.pb import model_config, parameters
from tritonprep.triton.profiling import PhaseTimer
from tritonprep.triton.tensors import concat, input_array, output_tensor, placement, to_numpy


class TritonPythonModel:
    def initialize(self, args):
        self.checksum = parameters(model_config(args)).get("checksum", "false") == "true"
        self.placement = None
        timer = PhaseTimer(args["model_instance_name"])  # logs with TRITONPREP_PROFILE=1
        self.requests = RequestIsolation(
            args["model_name"], self.read, [row_batched(self.run)], self.respond, timer=timer
        )

    def execute(self, requests):
        return self.requests.execute(requests)

    def read(self, request):
        x = input_array(request, "PIXELS")
        if self.placement is None:
            self.placement = placement(x)
            logging.getLogger("tritonprep.sink").info("sink: first batch arrived on the %s", self.placement)
        return x

    def run(self, inputs):
        if not self.checksum:
            return (np.zeros((sum(len(x) for x in inputs), 1), np.float32),)
        batch = concat(inputs)
        return (to_numpy(batch.reshape(len(batch), -1).sum(axis=1, keepdims=True).astype("float32")),)

    def respond(self, outputs):
        return [output_tensor("CHECKSUM", outputs[0])]
