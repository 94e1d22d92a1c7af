"""The network behind the preprocessing: runtimes, engine builds and postprocessing; no Triton here.

* :mod:`.runtimes` - the classifier on the best runtime installed (TensorRT, ONNX Runtime GPU or CPU)
* :mod:`.engines` - TensorRT engines built from the exported ONNX, rebuilt only when something changed
* :mod:`.builders` - the two TensorRT builders (the Python API, ``trtexec``) and the platform an engine is for
* :mod:`.ort_cuda`, :mod:`.tensorrt` - the GPU runtimes (each runs under :func:`tritonprep.cuda.cuda_fault_guard`)
* :mod:`.rows` - a batch's rows copied into a GPU runtime's input, from the host or any GPU
* :mod:`.postprocess` - softmax, top-k and ImageNet class names
* :mod:`.embedding` - the embedder's unit vectors (the same network without its head), FP32 or FP16
"""
