"""Benchmark ceiling: BYTES in, an uninitialised GPU tensor per request out, nothing in between.

The same request handling as the preprocess model (read the BYTES input, one output tensor per
request through DLPack, one stream synchronization per execute) without decoding or a kernel:
what Triton's Python backend costs on its own.
"""

import cupy

from tritonprep.triton.isolation import RequestIsolation, row_batched
from tritonprep.triton.pb import model_config
from tritonprep.triton.stub import finalize_instance
from tritonprep.triton.tensors import bytes_input, output_tensor


class TritonPythonModel:
    def initialize(self, args):
        config = model_config(args)
        declared = next(o for o in config["output"] if o["name"] == "PIXELS")
        # as the preprocess it stands in for: FP16 NHWC in the GPU config, FP32 NCHW in the CPU one
        self.dtype = cupy.float16 if declared["data_type"] == "TYPE_FP16" else cupy.float32
        self.dims = tuple(int(d) for d in declared["dims"])
        self.device = cupy.cuda.Device(int(args["model_instance_device_id"]))
        self.stream = cupy.cuda.Stream(non_blocking=True)
        self.requests = RequestIsolation(args["model_name"], self.read, [row_batched(self.run)], self.respond)

    def execute(self, requests):
        return self.requests.execute(requests)

    def read(self, request):
        return bytes_input(request, "IMAGE")

    def run(self, inputs):
        n = sum(len(x) for x in inputs)
        with self.device, self.stream:
            out = cupy.empty((-(-max(n, 1) // 16) * 16, *self.dims), dtype=self.dtype)[:n]
        self.stream.synchronize()
        return (out,)

    def respond(self, outputs):
        return [output_tensor("PIXELS", outputs[0])]

    def finalize(self):
        # as the shipped models end: the stub ends itself once its GPU work is done (tritonprep.triton.stub). The
        # interpreter's own teardown, freeing outputs the classifier opened from another process, left two of four
        # stubs hanging until Triton's exit timeout on an H100 (2026-11-27, the classify phase's null_classify).
        finalize_instance()
