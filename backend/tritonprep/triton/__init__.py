"""The Triton Python-backend side of every model; owns the request/response contract.

* :mod:`.pb` - ``triton_python_backend_utils`` (imported lazily: it exists only inside a stub),
  logging into Triton's log, the model config
* :mod:`.tensors` - tensors across the boundary (DLPack, GPU tensors stay on the GPU)
* :mod:`.isolation` - :class:`~.isolation.RequestIsolation`, the one per-request isolation engine:
  every model answers each request on its own through it (one response per request, whatever fails)
* :mod:`.responses` - success and error responses, :class:`~.responses.ImageRejected` (the server side of
  the per-image error contract, :mod:`tritonprep.image_errors`)
* :mod:`.preprocess` - :class:`~.preprocess.PreprocessStage` (images in, network inputs out) and
  :class:`~.preprocess.PreprocessModel`, everything a preprocess instance does
* :mod:`.health` - taking a broken instance out of service, heap trimming
* :mod:`.metrics`, :mod:`.profiling`, :mod:`.faults` - custom metrics, phase timings, fault injection

The ``model.py`` files of ``model_repository/`` only parse their config and call these.
"""
