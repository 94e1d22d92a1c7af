"""Executors turn the encoded images of one ``execute()`` call into the network's input batch.

* :mod:`.base` - what every executor is (:class:`~.base.Executor`) and returns (:class:`~.base.BatchResult`)
* :mod:`.cpu` - Pillow decode and resize, NumPy normalize: the CPU definition of the output
* :mod:`.gpu` - nvImageCodec decode and the fused CUDA kernel; must agree with the CPU one
* :mod:`.factory` - picks one for a model instance (:func:`~.factory.create_executor`)

Executors know the spec, the decoders and the kernels, and nothing of Triton.
"""

from __future__ import annotations

from .base import BatchResult, Executor, ImageInfo
from .factory import create_executor

__all__ = ["BatchResult", "Executor", "ImageInfo", "create_executor"]
