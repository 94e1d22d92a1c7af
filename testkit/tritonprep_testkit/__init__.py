"""The shared test kit of tests/ and scripts/: what both need to exercise a real server.

* :mod:`.photos` - real photos (scikit-image's samples) and benchmark JPEG sets
* :mod:`.corpus` - the hostile-input corpus, each item with the behaviour it demands
* :mod:`.compare` - references and tolerances for comparing pixels and predictions
* :mod:`.servers` - the checkout's paths and a scoped embedded server on free ports
* :mod:`.loadgen` - the gRPC load generator and the figures' report
* :mod:`.faults`, :mod:`.overload`, :mod:`.soak` - the fault, overload and soak scenarios
* :mod:`.overload_sweep` - the closed-loop overload sweep (1, 2, 4, 8 x the saturating concurrency) on
  :mod:`.closed_loop`'s clients, whose every answer is checked
* :mod:`.leftovers` - what outlives a server or a test run: processes, /dev/shm regions, GPU memory

It is installed with the project (``pip install -e .``); nothing in ``tritonprep`` imports it.
"""
