"""Test model: echoes its input while a thread logs through pb_utils.Logger every millisecond."""

import threading

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.stop = threading.Event()
        threading.Thread(target=self.chatter, daemon=True).start()

    def chatter(self):
        n = 0
        while not self.stop.wait(0.001):
            pb_utils.Logger.log_verbose(f"chatty {n}")  # a round trip to tritonserver; not printed at log-verbose 0
            n += 1

    def execute(self, requests):
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())])
            for r in requests
        ]

    def finalize(self):
        self.stop.set()
