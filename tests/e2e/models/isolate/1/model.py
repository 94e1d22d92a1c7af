"""Test model: doubles its input through tritonprep's batched_responses, failing on marked requests
(999: unreadable; negative: the batch fails; 777: the instance is broken)."""

import numpy as np

from tritonprep.errors import InstanceFailed, RequestError
from tritonprep.triton.pb import model_config
from tritonprep.triton.responses import batched_responses
from tritonprep.triton.tensors import concat, input_array, output_tensor


class TritonPythonModel:
    def initialize(self, args):
        model_config(args)  # routes logging to Triton's log
        self.batches = 0

    def execute(self, requests):
        return batched_responses(requests, self.read, self.run, self.respond, what="isolate")

    def read(self, request):
        x = input_array(request, "X")
        if (x[:, 0] == 999).any():
            raise RequestError("request marked unreadable (999)")
        return x

    def run(self, inputs):
        batch = concat(inputs)
        if (batch[:, 0] == 777).any():
            raise InstanceFailed("test: marked broken (777)")
        if (batch[:, 0] < 0).any():
            raise ValueError(f"negative input in a batch of {len(batch)}")
        return (np.asarray(batch * 2, np.float32),)

    def respond(self, outputs):
        return [output_tensor("Y", outputs[0])]
