"""CUDA kernels: the GPU executor's preprocessing, the classifier's softmax/top-k and the embedder's unit-length
step; owns every line of device code and how it is launched.

* ``*.cu`` - the CUDA sources (package data), the only place device code lives;
* :mod:`.layout` - the per-image metadata the kernels read: one table, used by the launcher
  to pack it and turned into the ``META_*`` indices the CUDA source reads (NumPy only);
* :mod:`.launch` - compiles each source once per device and option set (``cupy.memoize``,
  plus CuPy's on-disk cache) and launches it.

The kernels know nothing of specs, decoders, networks or Triton: they take device pointers (or CuPy
arrays), plain numbers and flags.
"""
