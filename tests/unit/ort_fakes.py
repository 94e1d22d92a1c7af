"""Host fakes shared by the unit tests of the ONNX Runtime CUDA runtime (tritonprep.classifier.ort_cuda), which run
without a GPU."""

from __future__ import annotations


class Context:
    """The runtime's device and stream: context managers that do nothing here, a stream that has nothing to wait
    for."""

    id = 0

    def __enter__(self) -> Context:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def synchronize(self) -> None:
        pass
