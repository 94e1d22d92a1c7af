"""Test model: answers with what it was loaded with (see config.pbtxt)."""

import json
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        here = Path(args["model_repository"])
        self.answer = json.dumps(
            {
                "parameters": {k: v["string_value"] for k, v in config["parameters"].items()},
                "count": sum(g["count"] for g in config["instance_group"]),
                "own_file": (here / args["model_version"] / "blob.txt").read_text(),
                "sibling_file": (here.parent / "sibling" / "1" / "blob.txt").read_text(),
            }
        )

    def execute(self, requests):
        out = np.array([self.answer.encode()], dtype=np.object_)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", out)]) for _ in requests]
