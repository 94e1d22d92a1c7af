"""Test model: doubles its input through tritonprep's RequestIsolation, failing on marked requests
(999: unreadable; negative: the batch fails; 555: its response cannot be built; 777: the instance is broken)."""

import numpy as np

from tritonprep.errors import InstanceFailed, RequestError
from tritonprep.triton.isolation import RequestIsolation, row_batched
from tritonprep.triton.pb import model_config
from tritonprep.triton.tensors import concat, input_array, output_tensor


class TritonPythonModel:
    def initialize(self, args):
        model_config(args)  # routes logging to Triton's log
        self.requests = RequestIsolation(args["model_name"], self.read, [row_batched(self.run)], self.respond)

    def execute(self, requests):
        return self.requests.execute(requests)

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
        if (outputs[0][:, 0] == 1110).any():
            raise ValueError("test: response marked unbuildable (555)")
        return [output_tensor("Y", outputs[0])]
