"""Test model: echoes its input; optionally starts a helper process and hangs in finalize()."""

import os
import subprocess
import time
from pathlib import Path

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.helper = None
        if os.environ.get("TRITONPREP_TEST_HELPER") == "1":
            # a process of the model's own, outside Triton's knowledge; it carries the stub's region name
            # (the stub's second argument) so that tests can find it
            region = Path("/proc/self/cmdline").read_bytes().split(b"\0")[2].decode()
            self.helper = subprocess.Popen(["/bin/sh", "-c", "while :; do sleep 0.2; done", region])

    def execute(self, requests):
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())])
            for r in requests
        ]

    def finalize(self):
        time.sleep(float(os.environ.get("TRITONPREP_TEST_FINALIZE_S", "0")))
