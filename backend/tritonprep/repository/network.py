"""One network to add, checked: the typed source every config of :mod:`.configs` is built from."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..classifier.labels import IMAGENET
from ..spec import OutputSpec

KINDS = ("classifier", "embedder")
#: a network's name: the ensemble clients call, and the prefix of its other models
NAME_PATTERN = re.compile(r"[a-z][a-z0-9_-]{0,47}")
#: the labels file written beside the network (and its container's top-k step)
LABELS_FILE = "labels.txt"
#: the top-k of a classifier added without ``--top-k`` (the shipped classifier's), at most its classes
DEFAULT_TOP_K = 5


@dataclass(frozen=True)
class Network:
    """A network to add: what clients call it, what it is, the preprocessing of its input, its ONNX signature."""

    name: str
    #: classifier (logits -> top-k classes) or embedder (a vector per image, answered at unit length)
    kind: str
    #: the preprocessing of its input: the new image output of ``preprocess``
    spec: OutputSpec
    #: the ONNX graph's input and (first) output names: the container's backends use them
    onnx_input: str
    onnx_output: str
    #: the network output's width: its classes (a classifier) or the embedding's length
    width: int
    #: predictions per image (a classifier; 0 for an embedder)
    top_k: int = 0
    #: the ``labels`` parameter: ``imagenet``, :data:`LABELS_FILE`, or empty (the label is the class index)
    labels: str = ""
    #: a ``model.fp16.onnx`` variant ships beside ``model.onnx`` (the GPU runtimes then run it)
    fp16: bool = False

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {self.kind!r}")
        if self.labels not in ("", IMAGENET, LABELS_FILE):
            raise ValueError(f"labels must be '', {IMAGENET!r} or {LABELS_FILE!r}, got {self.labels!r}")

    @property
    def classifier(self) -> bool:
        return self.kind == "classifier"

    @property
    def network_model(self) -> str:
        """The model that runs the network."""
        return f"{self.name}_network"

    @property
    def postprocess_model(self) -> str:
        """The container's top-k step after the TensorRT plan (a classifier's)."""
        return f"{self.name}_postprocess"

    @property
    def pixels(self) -> str:
        """The image output of ``preprocess`` that feeds the network."""
        return re.sub(r"[^A-Z0-9]", "_", self.name.upper()) + "_PIXELS"

    @property
    def models(self) -> tuple[str, ...]:
        """The models the network adds to a repository."""
        return (self.name, self.network_model, *((self.postprocess_model,) if self.classifier else ()))

    def tensor(self, what: str) -> str:
        """An ensemble's internal tensor, namespaced by the ensemble: ``<name>.<what>``."""
        return f"{self.name}.{what}"
