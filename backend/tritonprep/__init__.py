"""tritonprep: GPU image preprocessing for NVIDIA Triton Inference Server.

Modules, one concern each:

* :mod:`tritonprep.spec` - the typed preprocessing spec read from ``config.pbtxt``
* :mod:`tritonprep.geometry` - resize / crop / letterbox arithmetic shared by the executors
* :mod:`tritonprep.decode` - format sniffing and limits; Pillow (``cpu``) and nvImageCodec (``gpu``) decoders
* :mod:`tritonprep.executor` - the CPU executor and the executor factory
* :mod:`tritonprep.gpu` - the GPU executor (nvImageCodec + fused CuPy kernels)
* :mod:`tritonprep.kernels` - CUDA sources and their compiled, cached CuPy kernels
* :mod:`tritonprep.triton_glue` - request parsing and response building for Python-backend models
* :mod:`tritonprep.runtimes`, :mod:`tritonprep.trt_engine` - classifier runtimes, TensorRT engines
* :mod:`tritonprep.postprocess` - softmax, top-k, class names
* :mod:`tritonprep.server` - the embedded ``tritonserver`` launcher
"""

__version__ = "0.1.0"
