"""Triton Python-backend model `embedder`: EfficientNet-Lite0's L2-normalised pooled features.

Runs `model.onnx` from this version folder (scripts/export_embedder.py; on a GPU its FP16 variant
`model.fp16.onnx`, with batch buckets 1,8,32,64) on the best runtime installed, like the classifier
(tritonprep.classifier.runtimes), and returns the unit vectors in the dtype its config's `embedding`
output declares (tritonprep.classifier.embedding).
"""

import logging
from pathlib import Path

import triton_python_backend_utils as pb_utils

from tritonprep.classifier.embedding import OUTPUT, as_embeddings, embedding_dtype, onnx_file
from tritonprep.classifier.runtimes import RuntimeOptions, load_runtime
from tritonprep.errors import PreprocessError
from tritonprep.triton.health import report_loaded
from tritonprep.triton.isolation import RequestIsolation, row_batched
from tritonprep.triton.pb import model_config, parameters, teardown_logging
from tritonprep.triton.tensors import input_array, output_tensor

log = logging.getLogger("tritonprep.embedder")


class TritonPythonModel:
    def initialize(self, args):
        config = model_config(args)
        max_batch = int(config["max_batch_size"])
        try:
            self.dtype = embedding_dtype(config)
            options = RuntimeOptions.from_parameters(parameters(config), max_batch)
            self.runtime = load_runtime(
                onnx_file(Path(args["model_repository"]) / args["model_version"]),
                tuple(int(d) for d in config["input"][0]["dims"]),
                options=options,
                device_id=int(args["model_instance_device_id"]),
                use_gpu=args["model_instance_kind"] == "GPU",
                max_batch=max_batch,
            )
        except PreprocessError as e:
            raise pb_utils.TritonModelException(f"embedder: {e}") from e
        log.info("embedder instance %s: runtime %s, %s", args["model_instance_name"], self.runtime.name, self.dtype)
        report_loaded(
            args,
            runtime=self.runtime.name,
            buckets=options.batch_buckets if self.runtime.on_gpu else (),
            gpu_memory_mb=options.gpu_memory_mb or None,
            timings=self.runtime.timings,
        )
        self.requests = RequestIsolation(args["model_name"], self.read, [row_batched(self.run)], self.respond)

    def execute(self, requests):
        return self.requests.execute(requests)

    def read(self, request):
        return input_array(request, "input")

    def run(self, inputs):
        return (as_embeddings(self.runtime.infer_many(inputs), self.dtype),)

    def respond(self, outputs):
        return [output_tensor(OUTPUT, outputs[0])]

    def finalize(self):
        # the sessions, their CUDA graphs and buffers go now, in order, not at interpreter exit
        try:
            self.runtime.close()
        finally:
            teardown_logging()
