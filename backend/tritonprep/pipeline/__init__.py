"""The models that wire Triton's request layer to the networks: the whole job in one process, and each network.

* :mod:`.fused` - :class:`~.fused.FusedClassifyModel`, the ``classify_fused`` model: the ``classify``
  ensemble's three steps (preprocess -> classifier -> postprocess) in one Python-backend instance, so
  the pixels never cross a process boundary and each request pays the Python backend once, not three
  times. Same inputs, outputs and per-request errors as ``classify``.
* :mod:`.networks` - :class:`~.networks.ClassifierModel` and :class:`~.networks.EmbedderModel`, the
  ``classifier`` and ``embedder`` models: a network runtime behind the per-request contract.

This is the one package that wires :mod:`tritonprep.triton` (the request/response contract and the
preprocess model) to :mod:`tritonprep.classifier` (the network runtimes); neither imports the other.
"""
