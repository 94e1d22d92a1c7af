"""A GPU server's whole life on the GPU repository (issue 25): it loads every model, serves each, logs
cleanly, and stops quickly with exit code 0.

One server of its own (not the session's): the test stops it and reads what Triton logged while its
models unloaded. What it checks:

* every model answers (the ensembles, the raw models, a JPEG 2000 and a TIFF on the GPU executor);
* the log has none of the lines issue 25 names: ONNX Runtime's ``No registered plugin EP device found``,
  nvImageCodec's per-image ``[ERROR]`` lines for a bad image (the executor counts them instead), its
  ``Failed to load nvJPEG2000`` / ``nvTIFF`` lines where their wheels are installed;
* the GPU instances log their start-up phases (``started in``) and how long their release took (``released in``,
  or ``idle in`` for a GPU executor whose stub ends itself, :mod:`tritonprep.triton.stub`);
* stopping: every model's ``successfully unloaded`` line comes within :data:`UNLOAD_S_PER_INSTANCE` per
  instance of the signal (Triton finalizes a model's instances one after another; the Python backend
  waits 1 s in each), tritonserver exits 0 well inside its 30 s exit timeout, and no stub printed
  ``terminate called``.
"""

from __future__ import annotations

import importlib.util
import re
import time
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest

from tritonprep_testkit import corpus
from tritonprep_testkit.photos import encode

#: the longest one instance of a model may take to finalize and exit: the Python backend's 1 s, the instance's
#: release and wait for its GPU work, the stub's own end (tritonprep.triton.stub.end_stub_process); measured on
#: the H100 1.28 s an instance of preprocess x4 and up to 1.71 s for classify_fused x1, whose network releases
#: its sessions (reports/2026-11-25-h100-stage5)
UNLOAD_S_PER_INSTANCE = 2.5  # 2.03 s for classify_fused x1 on a 4-GPU H100 host (reports/2026-11-26-gpu-stage11)
#: tritonserver's own exit timeout in the served options; a clean stop ends far inside it
EXIT_TIMEOUT_S = 30
_LINE = re.compile(r"^[IWE](\d{4}) (\d\d:\d\d:\d\d\.\d+) .*?\"successfully unloaded '([\w.-]+)' version")
_SIGNAL = re.compile(r"^I(\d{4}) (\d\d:\d\d:\d\d\.\d+) .*\"Waiting for in-flight requests to complete")


def _when(day: str, clock: str) -> datetime:
    return datetime.strptime(f"{day} {clock}", "%m%d %H:%M:%S.%f")


def unload_times(log: str) -> dict[str, float]:
    """Seconds from the stop signal to each model's ``successfully unloaded`` line in Triton's log."""
    start = next((_when(*m.groups()) for m in map(_SIGNAL.match, log.splitlines()) if m), None)
    assert start is not None, "Triton logged no stop ('Waiting for in-flight requests to complete')"
    times = {}
    for line in log.splitlines():
        m = _LINE.match(line)
        if m:
            times[m.group(3)] = (_when(m.group(1), m.group(2)) - start).total_seconds()
    return times


def instance_counts(log: str) -> dict[str, int]:
    """Instances per model, from Triton's ``TRITONBACKEND_ModelInstanceInitialize`` lines (one per instance)."""
    counts: dict[str, int] = {}
    for name in re.findall(r"TRITONBACKEND_ModelInstanceInitialize: (\w+?)_\d+_\d+ ", log):
        counts[name] = counts.get(name, 0) + 1
    return counts


def infer(client, module, model: str, name: str, array: np.ndarray, outputs: list[str]) -> list[np.ndarray]:
    from tritonclient.utils import np_to_triton_dtype

    # the array's own type: on the GPU the steps hand FP16 pixels to the networks (the served configs say so)
    tensor = module.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
    tensor.set_data_from_numpy(array)
    result = client.infer(model, [tensor], outputs=[module.InferRequestedOutput(o) for o in outputs])
    return [result.as_numpy(o) for o in outputs]


def test_the_gpu_repository_serves_every_model_logs_cleanly_and_stops_cleanly(cp, nvimgcodec, tmp_path, jpegs, photos):
    if importlib.util.find_spec("pytriton") is None:
        pytest.skip("the embedded server (nvidia-pytriton) is not installed here")
    import tritonclient.grpc as module
    from tritonclient.utils import InferenceServerException

    from tritonprep.launcher.process import EmbeddedServer
    from tritonprep_testkit.servers import local_options

    log_path = tmp_path / "tritonserver.log"
    # one GPU's server (what each GPU of a multi-GPU host runs): its instance counts set the stop's bounds
    server = EmbeddedServer(local_options(exit_timeout_s=EXIT_TIMEOUT_S, gpus=(0,)), log_path)
    t0 = time.monotonic()
    server.start()
    code = None
    try:
        server.wait_ready()
        ready_s = time.monotonic() - t0
        client = module.InferenceServerClient(server.options.grpc_url.removeprefix("grpc://"))
        try:
            images = np.array([[jpegs["chelsea"]], [jpegs["coffee"]]], dtype=object)
            odd = np.array(
                [[encode(photos["chelsea"], "JPEG2000")], [encode(photos["coffee"], "TIFF", compression="tiff_lzw")]],
                dtype=object,
            )
            for model in ("classify", "classify_fused"):
                [ids] = infer(client, module, model, "IMAGE", images, ["CLASS_IDS"])
                assert ids[0][0] in (281, 282, 285) and ids[1][0] == 967, (model, ids)
            [emb] = infer(client, module, "embed", "IMAGE", images, ["EMBEDDING"])
            assert emb.shape == (2, 1280)
            [ids, emb2] = infer(client, module, "analyze", "IMAGE", odd, ["CLASS_IDS", "EMBEDDING"])
            assert ids[0][0] in (281, 282, 285) and ids[1][0] == 967 and emb2.shape == (2, 1280)
            outputs = ["PIXELS", "EMBED_PIXELS", "DECODER"]
            [pixels, embed_pixels, decoder] = infer(client, module, "preprocess", "IMAGE", odd, outputs)
            [logits] = infer(client, module, "classifier", "input", pixels, ["logits"])
            [scores] = infer(client, module, "postprocess", "LOGITS", logits, ["SCORES"])
            [vectors] = infer(client, module, "embedder", "input", embed_pixels, ["embedding"])
            assert scores.shape == (2, 5) and vectors.shape == (2, 1280)
            if importlib.util.find_spec("nvidia.nvjpeg2k") and importlib.util.find_spec("nvidia.nvtiff"):
                assert [d[0] for d in decoder] == [b"gpu_cuda", b"gpu_cuda"], decoder  # decoded on the GPU
            # JPEGs whose headers pass the checks but whose data nvJPEG refuses or mangles (the hostile corpus'
            # bit flips): whatever each answer, nvImageCodec must not print a line per image
            flipped = [
                it.data for it in corpus.build() if it.name.startswith(("bitflip-header/jpeg", "bitflip-data/jpeg"))
            ]
            for data in flipped:
                try:
                    infer(client, module, "preprocess", "IMAGE", np.array([[data]], dtype=object), ["PIXELS"])
                except InferenceServerException:
                    pass  # a clean error for that request
        finally:
            client.close()
        t_stop = time.monotonic()
        code = server.stop()
        stop_s = time.monotonic() - t_stop
    finally:
        if code is None:
            server.stop()
    log = log_path.read_text(errors="replace")
    lines = log.splitlines()
    assert not [ln for ln in lines if "No registered plugin EP device found" in ln], "ORT's lookup warning is back"
    nv_errors = [ln for ln in lines if "[ERROR]" in ln and ("nvjpeg" in ln.lower() or "nvimgcodec" in ln.lower())]
    assert not nv_errors, f"nvImageCodec printed per-image errors: {nv_errors[:3]}"
    for lib, wheel in (("nvJPEG2000", "nvidia.nvjpeg2k"), ("nvTIFF", "nvidia.nvtiff")):
        if importlib.util.find_spec(wheel):
            assert not [ln for ln in lines if f"Failed to load {lib}" in ln], lib
    assert not [ln for ln in lines if "terminate called" in ln], "a stub aborted at exit"
    assert "started in" in log and "released in" in log, "the GPU instances did not log their phases"
    assert code == 0, f"tritonserver exited with {code}"
    unloaded = unload_times(log)
    counts = instance_counts(log)
    served = {"preprocess", "classifier", "embedder", "postprocess", "classify_fused", "classify", "embed", "analyze"}
    assert served <= set(unloaded), f"never unloaded: {sorted(served - set(unloaded))}"
    slow = {
        model: (round(s, 2), counts.get(model, 1))
        for model, s in unloaded.items()
        if s > UNLOAD_S_PER_INSTANCE * max(1, counts.get(model, 1))
    }
    summary = f"ready in {ready_s:.1f} s; stop {stop_s:.1f} s; unloaded {unloaded}; instances {counts}"
    print(summary)  # noqa: T201 - the figures the lead records
    assert not slow, f"models slower to unload than {UNLOAD_S_PER_INSTANCE} s per instance: {slow}; {summary}"
    assert stop_s < EXIT_TIMEOUT_S / 2, summary
    Path(tmp_path / "figures.txt").write_text(summary + "\n")
