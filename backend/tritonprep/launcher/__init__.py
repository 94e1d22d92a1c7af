"""The embedded server: runs, watches and stops the ``tritonserver`` of the nvidia-pytriton wheel.

* :mod:`.options` - :class:`~.options.ServerOptions` and the secure defaults
* :mod:`.install` - where the wheel put tritonserver, its Python backend and stubs
* :mod:`.process` - :class:`~.process.EmbeddedServer`, one tritonserver process and its lifecycle
* :mod:`.watchdog` - the process between the launcher and each tritonserver: owns its process tree and
  shared memory, and removes both however the server ends
* :mod:`.reaper` - each server's shared-memory prefix, and the sweep of what dead servers left
* :mod:`.probes` - free ports, the metrics text, requests in flight
* :mod:`.supervise` - restarts tritonserver when a model stops serving
* :mod:`.cli` - ``tritonprep serve``

Nothing here imports the models' side (:mod:`tritonprep.triton`): the launcher talks to the
server only through processes, ports and files.
"""
