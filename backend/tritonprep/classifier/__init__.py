"""The network behind the preprocessing: runtimes, engine builds and postprocessing; no Triton here.

* :mod:`.runtimes` - the classifier on the best runtime installed (TensorRT, ONNX Runtime GPU or CPU)
* :mod:`.engines` - TensorRT engines built from the exported ONNX, rebuilt only when something changed
* :mod:`.postprocess` - softmax, top-k and ImageNet class names
* :mod:`.embedding` - the embedder's unit vectors (the same network without its head), FP32 or FP16
"""
