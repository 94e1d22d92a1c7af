"""Triton Python-backend model `preprocess`: encoded images in, network input tensor out.

Thin by design: the spec, decoders, executors and request/response rules live in the
`tritonprep` library (backend/tritonprep); this file wires them to Triton.
"""

import logging
import time

import triton_python_backend_utils as pb_utils

from tritonprep import triton_glue as glue
from tritonprep.errors import PreprocessError
from tritonprep.executor import create_executor
from tritonprep.profiling import PhaseTimer
from tritonprep.spec import PreprocessSpec

log = logging.getLogger("tritonprep.preprocess")


class TritonPythonModel:
    def initialize(self, args):
        config = glue.model_config(args)
        try:
            self.spec = PreprocessSpec.from_model_config(config, output_name="PIXELS")
            self.executor = create_executor(self.spec, args["model_instance_kind"], int(args["model_instance_device_id"]))
        except PreprocessError as e:
            raise pb_utils.TritonModelException(f"preprocess: {e}") from e
        log.info("preprocess instance %s: %s executor, spec %s", args["model_instance_name"], self.executor.name, self.spec)
        self.timer = PhaseTimer(args["model_instance_name"])

    def execute(self, requests):
        t0 = time.perf_counter()
        batch = glue.gather_images(requests, "IMAGE", self.spec.limits.max_images_per_request)
        t1 = time.perf_counter()
        result = self.executor.run(batch.images)
        t2 = time.perf_counter()
        responses = glue.image_responses(batch, result.output, result.errors, "PIXELS")
        self.timer.record(len(requests), len(batch.images), gather=t1 - t0, run=t2 - t1,
                          respond=time.perf_counter() - t2, **result.timings)
        return responses

    def finalize(self):
        self.executor.close()
