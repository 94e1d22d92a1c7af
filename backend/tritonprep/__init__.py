"""tritonprep: GPU image preprocessing for NVIDIA Triton Inference Server.

Packages by concern, lowest layer first (each imports only from the layers above it in this list):

* :mod:`tritonprep.errors` - the exception hierarchy
* :mod:`tritonprep.cuda` - CuPy's import with its install hint, and the guard that turns a sticky CUDA error
  into :class:`~tritonprep.errors.InstanceFailed` on every GPU path
* :mod:`tritonprep.image_errors` - the per-image error contract the client reads too (standard library only)
* :mod:`tritonprep.parameters` - ``config.pbtxt`` parameters as tables (name, field, reader, default, help)
* :mod:`tritonprep.spec` - the typed preprocessing spec read from ``config.pbtxt``: per-output specs and the
  model-wide decoding, executor and limits, held once (one parameter table)
* :mod:`tritonprep.geometry` - resize / crop / letterbox arithmetic shared by the executors
* :mod:`tritonprep.decode` - checks before decoding, Pillow and nvImageCodec decoders
* :mod:`tritonprep.kernels` - CUDA sources, their metadata layout and launchers (plain values only)
* :mod:`tritonprep.executors` - CPU and GPU executors: encoded images in, one batch out
* :mod:`tritonprep.classifier` - the network's runtimes, TensorRT engines, postprocessing
* :mod:`tritonprep.triton` - the Python-backend side: requests, responses, health, metrics
* :mod:`tritonprep.launcher` - the embedded ``tritonserver``: options, process, supervision, CLI
* :mod:`tritonprep.pipeline` - whole jobs in one instance (``classify_fused``): the Triton side wired to the network

``tests/unit/test_layout.py`` keeps the order (its table says what each part may import): no package
imports one listed after it, and there are no cycles.
"""

__version__ = "0.1.0"
