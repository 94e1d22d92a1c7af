"""The model repository as typed configs: adding a network of your own (``tritonprep model add``).

A network added to a repository is a handful of Triton models, each config built as Triton's
``ModelConfig`` message (:mod:`.configs`) from one checked description of the network
(:class:`~.network.Network`), never from text templates:

* ``<NAME>``: the ensemble clients call (``tritonprep classify --model NAME``): ``preprocess``, then the network;
* ``<NAME>_network``: the network on the shipped runtimes (a Python-backend model running ``model.onnx``:
  ``config.pbtxt`` for the CPU, ``configs/gpu.pbtxt`` for a GPU) and, for a classifier, the container's
  TensorRT variants (``configs/tensorrt.pbtxt``: a ``tensorrt_plan``; ``configs/onnxruntime.pbtxt``: ONNX
  Runtime's TensorRT provider), which answer logits, and ``<NAME>_postprocess``, their top-k step;
* a new image output of ``preprocess``, ``<NAME>_PIXELS``, with the network's preprocessing: one decode feeds
  every network, as ``EMBED_PIXELS`` feeds the shipped embedder.

:mod:`.onnx_io` reads the ONNX file's signature, :mod:`.checks` turns the command's arguments into a
:class:`~.network.Network` or a list of one-line problems (nothing written), :mod:`.write` writes the files
(a new repository starts as a copy of the shipped one, :mod:`.paths`) and :mod:`.cli` is the command. The
guide: docs/your-network.md.
"""
