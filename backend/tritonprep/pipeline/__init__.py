"""Whole jobs in one model instance: decode, preprocess, the network and its post-processing in one process.

* :mod:`.fused` - :class:`~.fused.FusedClassifyModel`, the ``classify_fused`` model: the ``classify``
  ensemble's three steps (preprocess -> classifier -> postprocess) in one Python-backend instance, so
  the pixels never cross a process boundary and each request pays the Python backend once, not three
  times. Same inputs, outputs and per-request errors as ``classify``.

This is the one package that wires :mod:`tritonprep.triton` (the request/response contract and the
preprocess model) to :mod:`tritonprep.classifier` (the network runtimes); neither imports the other.
"""
