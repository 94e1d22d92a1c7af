"""The thin ``1/model.py`` of each model an added network brings: the shipped models' code, for any network.

They hand everything to the library (``tritonprep.pipeline.networks`` for the network, ``TopK`` for the
container's top-k step), as the shipped ``classifier``, ``embedder`` and ``postprocess`` do; the unit tests
hold their code equal to those, docstrings aside.
"""

from __future__ import annotations

_NETWORK = '''"""Triton Python-backend model: a {kind} added by `tritonprep model add` (docs/your-network.md).

Thin by design: `model.onnx` from this version folder (on a GPU its FP16 variant `model.fp16.onnx` where
the config says precision fp16) on the best runtime installed, answering what its config declares, lives in
the `tritonprep` library (tritonprep.pipeline.networks.{cls}).
"""

import triton_python_backend_utils as pb_utils

from tritonprep.errors import PreprocessError
from tritonprep.pipeline.networks import {cls}
from tritonprep.triton.stub import finalize_instance


class TritonPythonModel:
    def initialize(self, args):
        try:
            self.model = {cls}(args)
        except PreprocessError as e:
            raise pb_utils.TritonModelException(f"{{args['model_name']}}: {{e}}") from e

    def execute(self, requests):
        return self.model.execute(requests)

    def finalize(self):
        finalize_instance(self.model.close)
'''

POSTPROCESS = '''"""Triton Python-backend model: the container's top-k step of a classifier from `tritonprep model add`.

Logits to top-k scores, class ids and names (SCORES, CLASS_IDS, LABELS; k from their dims, the names
from the `labels` parameter): tritonprep.classifier.postprocess.TopK, as the shipped `postprocess`.
"""

from pathlib import Path

import triton_python_backend_utils as pb_utils

from tritonprep.classifier.postprocess import TopK
from tritonprep.errors import PreprocessError
from tritonprep.triton.isolation import RequestIsolation, row_batched
from tritonprep.triton.pb import model_config
from tritonprep.triton.stub import finalize_instance
from tritonprep.triton.tensors import concat, input_array, named_tensors, to_numpy


class TritonPythonModel:
    def initialize(self, args):
        try:
            config = model_config(args)
            self.top_k = TopK.from_config(config, Path(args["model_repository"]), classes_of="LOGITS")
        except PreprocessError as e:
            raise pb_utils.TritonModelException(f"{args['model_name']}: {e}") from e
        self.requests = RequestIsolation(args["model_name"], self.read, [row_batched(self.run)], self.respond)

    def execute(self, requests):
        return self.requests.execute(requests)

    def read(self, request):
        return to_numpy(input_array(request, "LOGITS"))

    def run(self, logits):
        return self.top_k(concat(logits))

    def respond(self, rows):
        return named_tensors(self.top_k.outputs(*rows))

    def finalize(self):
        finalize_instance()
'''


def network_model_py(kind: str) -> str:
    """The ``model.py`` of a network model of ``kind`` (classifier or embedder)."""
    cls = {"classifier": "ClassifierModel", "embedder": "EmbedderModel"}[kind]
    return _NETWORK.format(kind=kind, cls=cls)
