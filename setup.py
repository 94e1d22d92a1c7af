"""The wheel's model repository: a build step that packs ``model_repository/`` into ``tritonprep/model_repository/``.

Everything else about the distribution is in pyproject.toml. A wheel built from a checkout (``make wheel``,
``python -m build``, ``pip install .``) holds the repository that ``tritonprep serve`` serves when no
``--model-repository`` is given outside a checkout: every model's configs and ``model.py``, and the networks
that ``make model`` exports (:data:`NETWORKS`), whose absence fails the build with what to run. Files that
runtimes write beside a network (TensorRT plans and caches) and bytecode stay out.

An editable install (``make setup``) packs nothing: it serves the checkout's ``model_repository/``. A build
from a tree without ``model_repository/`` (NVIDIA's container image installs the library alone and copies the
repository itself) gives the library without models, and says so.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.errors import FileError

SOURCE = Path(__file__).resolve().parent / "model_repository"
#: where the repository lies inside the wheel (tritonprep.launcher.options.PACKAGED_REPOSITORY)
TARGET = Path("tritonprep", "model_repository")
#: what `make model` exports: a wheel without them could not serve the classifier, embedder and classify_fused
NETWORKS = (
    "classifier/1/model.onnx",
    "classifier/1/model.fp16.onnx",
    "classifier/1/model.fp16.nhwc.onnx",
    "embedder/1/model.onnx",
    "embedder/1/model.fp16.onnx",
    "embedder/1/model.fp16.nhwc.onnx",
)
#: written by runtimes and Python beside the models, never shipped
LEFT_OUT = ("__pycache__", "*.pyc", "*.plan", "*.plan.*", "timing.cache*", "ort-trt-cache", "*.tmp")


class BuildPyWithModels(build_py):
    """``build_py``, then the model repository copied into the build (see the module's description)."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        if not SOURCE.is_dir():
            self.announce(f"no {SOURCE.name}/ here: building the library without a model repository", level=3)
            return
        missing = [name for name in NETWORKS if not (SOURCE / name).is_file()]
        if missing:
            raise FileError(
                f"{SOURCE.name}/{missing[0]} is missing ({len(missing)} of the exported networks): run `make model` "
                "before building the wheel (`make wheel` does)"
            )
        dest = Path(self.build_lib) / TARGET
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(SOURCE, dest, ignore=shutil.ignore_patterns(*LEFT_OUT))  # links become the files they name


setup(cmdclass={"build_py": BuildPyWithModels})
