"""The embedded server: runs, watches and stops the ``tritonserver`` of the nvidia-pytriton wheel.

* :mod:`.options` - :class:`~.options.ServerOptions` and the secure defaults
* :mod:`.install` - where the wheel put tritonserver, its Python backend and stubs; the GPUs it sees
* :mod:`.command` - the tritonserver command line (and the flags of a machine without a GPU)
* :mod:`.budget` - the GPU memory budget: instance counts and batch buckets that fit (pure)
* :mod:`.served` - the served copy of the repository with the budget's choices
* :mod:`.process` - :class:`~.process.EmbeddedServer`, one tritonserver process and its lifecycle
* :mod:`.watchdog` - the process between the launcher and each tritonserver: owns its process tree,
  shared memory and MPS daemon, and removes them however the server ends
* :mod:`.protocol` - the line protocol between the launcher and its watchdog
* :mod:`.mps` - the private CUDA MPS daemon of each start
* :mod:`.logs` - how the launcher's own processes log (the level shown on warnings and errors)
* :mod:`.logfilter` - tritonserver's log without Triton's failed CUDA probes, on a machine without a GPU
* :mod:`.proctable` - the one reader of the process table (/proc)
* :mod:`.reaper` - each server's shared-memory prefix, and the sweep of what dead servers left
* :mod:`.probes` - the metrics text, requests in flight, the drain before a stop
* :mod:`.supervise` - restarts tritonserver when a model stops serving (or an instance reports a fault)
* :mod:`.summary` - the start-up summary block
* :mod:`.cli` - ``tritonprep serve``

Nothing here imports the models' side (:mod:`tritonprep.triton`): the launcher talks to the
server only through processes, ports and files (the instances' reports, :mod:`tritonprep.reports`).
"""
