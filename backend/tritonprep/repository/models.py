"""The thin ``1/model.py`` of each model an added network brings: the shipped models' code, for any network.

They hand everything to the library (``tritonprep.pipeline.networks``: the network, or the container's top-k
step), as the shipped ``classifier``, ``embedder`` and ``postprocess`` do; the unit tests hold their code equal
to those, docstrings aside.
"""

from __future__ import annotations

_NETWORK = '''"""Triton Python-backend model: {what} added by `tritonprep model add`
(docs/your-network.md).

Thin by design: {does}, lives in the `tritonprep` library
(tritonprep.pipeline.networks.{cls}).
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


def network_model_py(kind: str) -> str:
    """The ``model.py`` of a model of ``kind``: a network (classifier or embedder), or a classifier's top-k step
    (postprocess)."""
    cls = {"classifier": "ClassifierModel", "embedder": "EmbedderModel", "postprocess": "PostprocessModel"}[kind]
    if kind == "postprocess":
        what, does = "the container's top-k step of a classifier", "logits to SCORES, CLASS_IDS and LABELS"
    else:
        what = f"a {kind}"
        does = (
            "`model.onnx` from this version folder (on a GPU its FP16 variant `model.fp16.onnx` where the\n"
            "config says precision fp16) on the best runtime installed, answering what its config declares"
        )
    return _NETWORK.format(what=what, does=does, cls=cls)


#: the ``model.py`` of the container's top-k step of an added classifier
POSTPROCESS = network_model_py("postprocess")
