"""The ``classifier`` and ``embedder`` models: a network on the best runtime, behind the per-request contract.

Both load ``model.onnx`` from their version folder (on a GPU its FP16 variant and batch buckets) on
TensorRT, ONNX Runtime's CUDA EP or ONNX Runtime on the CPU (:mod:`tritonprep.classifier.runtimes`, which
documents the config parameters), report what they loaded to the launcher, and answer every request on
its own (:class:`~tritonprep.triton.isolation.RequestIsolation`).

* :class:`ClassifierModel` answers what each request asks for: ``logits``, and the top-k predictions
  ``SCORES``, ``CLASS_IDS`` and ``LABELS`` where its config declares them
  (:class:`~tritonprep.classifier.postprocess.TopK`, computed where the logits are: on the GPU for a GPU
  runtime; the names from its ``labels`` parameter, :mod:`tritonprep.classifier.labels`), so that the embedded
  ``classify`` and ``analyze`` ensembles need no postprocess step.
* :class:`EmbedderModel` returns the unit vectors in the dtype and width its config's ``embedding`` output
  declares (:mod:`tritonprep.classifier.embedding`).
* :class:`PostprocessModel` is the top-k step after a network that answers logits only (the container's
  TensorRT plan): the same :class:`~tritonprep.classifier.postprocess.TopK`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..classifier.embedding import OUTPUT, as_embeddings, embedding_dtype, onnx_file
from ..classifier.labels import PARAMETER as LABELS_PARAMETER
from ..classifier.postprocess import OUTPUTS as TOP_K_OUTPUTS
from ..classifier.postprocess import TopK
from ..classifier.runtimes import Runtime, RuntimeOptions, load_runtime
from ..cuda import set_mps_client
from ..parameters import MPS_PARAMETERS, mps_client_parameters
from ..triton.health import report_loaded, server_ready_probe
from ..triton.isolation import RequestIsolation, row_batched
from ..triton.pb import model_config, output_dims, parameters
from ..triton.profiling import PhaseTimer
from ..triton.tensors import (
    as_array,
    bytes_tensor,
    concat,
    input_array,
    input_tensor,
    is_bytes,
    named_tensors,
    output_tensor,
    placement,
    requested_outputs,
    to_numpy,
)
from ..triton.turns import PARAMETER as TURNS_PARAMETER
from ..triton.turns import turns_for

log = logging.getLogger(__name__)

LOGITS = "logits"


def load_network(
    args: Mapping[str, str],
    config: Mapping[str, Any],
    onnx_path: Path,
    top_k: TopK | None = None,
    model_parameters: Collection[str] = (),
    embeddings: np.dtype | None = None,
) -> Runtime:
    """The instance's network on the best runtime for its kind and device (its ``top_k`` warmed on it, see
    :func:`warm_top_k`; for an embedder, the ``embeddings`` dtype's unit-length step, :func:`warm_embeddings`),
    reported to the launcher. ``model_parameters``: the config's parameters that the model reads itself (every other
    one is the runtime's, and one it does not know is an error)."""
    max_batch = int(config["max_batch_size"])
    params = parameters(config)
    on_gpu = args["model_instance_kind"] == "GPU"
    share, priority = mps_client_parameters(params)  # checked on any instance: a bad value fails every load alike
    if on_gpu:  # before anything creates this process's CUDA context
        set_mps_client(share, priority)
        if share or priority:
            log.info(
                "%s: an MPS client with %s, priority %s",
                args["model_instance_name"],
                f"{share} % of the SMs" if share else "the server's share of the SMs",
                "below normal" if priority else "normal",
            )
    skip = {*model_parameters, *MPS_PARAMETERS}
    runtime_params = {k: v for k, v in params.items() if k not in skip}
    options = RuntimeOptions.from_parameters(runtime_params, max_batch)
    dims = tuple(int(d) for d in config["input"][0]["dims"])
    runtime = load_runtime(
        onnx_path,
        dims,
        options=options,
        device_id=int(args["model_instance_device_id"]),
        use_gpu=on_gpu,
        max_batch=max_batch,
        late_start=server_ready_probe(),  # late buckets after the repository's start, not beside it
    )
    try:
        warm_top_k(top_k, runtime, dims)
        if embeddings is not None:
            warm_embeddings(runtime, dims, embeddings)
    except BaseException:  # the caller never gets this runtime: release its GPU here
        runtime.close()
        raise
    report_loaded(
        args,
        runtime=runtime.name,
        buckets=options.batch_buckets if runtime.on_gpu else (),
        gpu_memory_mb=options.gpu_memory_mb or None,
        timings=runtime.timings,
    )
    return runtime


def warm_top_k(top_k: TopK | None, runtime: Runtime, input_dims: Sequence[int]) -> None:
    """One image of zeros through the network and the top-k, where both run on the GPU: the top-k kernel is
    compiled (or read from CuPy's cache) while loading, not in the first request (``top_k_warm`` in the
    runtime's timings)."""
    if top_k is not None and runtime.on_gpu:
        t0 = time.perf_counter()
        runtime.infer_many([np.zeros((1, *input_dims), np.float32)], then=top_k.enqueued)  # as requests run it
        runtime.timings["top_k_warm"] = time.perf_counter() - t0


def warm_embeddings(runtime: Runtime, input_dims: Sequence[int], dtype: np.dtype) -> None:
    """One image of zeros through the network and the unit-length step (:func:`as_embeddings`), where both run on
    the GPU: that step's kernel (one for any batch) is compiled, or read from CuPy's cache, while loading, not in the
    first requests (``embed_warm`` in the runtime's timings). The first server on a fresh H100 refused `analyze`
    requests at their queue timeout while CuPy compiled the step's kernels (reports/2026-11-27-gpu-stage21 and
    stage 22: CuPy compiles its elementwise and reduction kernels per shape class, so a warm-up of one image did
    not compile what a batch of several ran)."""
    if runtime.on_gpu:
        t0 = time.perf_counter()
        as_embeddings(runtime.infer(np.zeros((1, *input_dims), np.float32)), dtype)
        runtime.timings["embed_warm"] = time.perf_counter() - t0


def network_classes(runtime: Runtime, input_dims: Sequence[int]) -> int:
    """The width of the network's output (its classes): one image of zeros through it, at load."""
    return int(runtime.infer(np.zeros((1, *input_dims), np.float32)).shape[-1])


@dataclass(frozen=True)
class NetworkInput:
    """A request's images and the outputs it asked for."""

    x: Any
    wanted: frozenset[str]

    def __len__(self) -> int:
        return len(self.x)


class ClassifierModel:
    """One instance of ``classifier``."""

    def __init__(self, args: Mapping[str, str]) -> None:
        config = model_config(args)
        dims = output_dims(config)
        folder = Path(args["model_repository"])
        # the top-k outputs where the config declares them (k from their dims, the names from its labels)
        declared = any(name in dims for name in TOP_K_OUTPUTS)
        self.top_k = TopK.from_config(config, folder, classes_of=LOGITS) if declared else None
        onnx = folder / args["model_version"] / "model.onnx"
        self.turns = turns_for(args, parameters(config))  # the instances on one GPU take turns at the network
        self.runtime = load_network(
            args, config, onnx, self.top_k, model_parameters=(TURNS_PARAMETER, LABELS_PARAMETER)
        )
        self.offered = [name for name in dims if name == LOGITS or (self.top_k and name in TOP_K_OUTPUTS)]
        log.info(
            "classifier instance %s: runtime %s, outputs %s%s",
            args["model_instance_name"],
            self.runtime.name,
            ", ".join(self.offered),
            ", turns at the GPU" if self.turns.enabled else "",
        )
        self._placement_logged = False
        self.timer = PhaseTimer(args["model_instance_name"])  # logs phase times with TRITONPREP_PROFILE=1
        self.requests = RequestIsolation(args["model_name"], self.read, [self.run], self.respond, timer=self.timer)

    def execute(self, requests: Sequence[Any]) -> list[Any]:
        """One response per request, whatever happens."""
        return self.requests.execute(requests)

    def read(self, request: Any) -> NetworkInput:
        """A request's images and the outputs it asked for; the timer gets the backend's tensor (``read_tensor``)
        and its array through DLPack (``read_array``) apart."""
        t0 = time.perf_counter()
        tensor = input_tensor(request, "input")
        t1 = time.perf_counter()
        x = as_array(tensor)
        self.timer.add(read_tensor=t1 - t0, read_array=time.perf_counter() - t1)
        if not self._placement_logged:
            log.info("classifier: first batch input on the %s, runtime %s", placement(x), self.runtime.name)
            self._placement_logged = True
        return NetworkInput(x, requested_outputs(request, self.offered))

    def run(self, inputs: Sequence[NetworkInput]) -> list[dict[str, Any]]:
        """The network over every request's images at once, then only the outputs some request asked for:
        the top-k where the logits are (a few bytes an image leave the GPU), the logits copied to the host,
        both enqueued behind the network (the runtime waits once for all of it)."""
        wanted = frozenset().union(*(i.wanted for i in inputs))
        marks: dict[str, float] = {}

        def finish(logits: Any) -> tuple[tuple[np.ndarray, np.ndarray] | None, np.ndarray | None]:
            marks["launched"] = time.perf_counter()
            # the top-k's copy is only enqueued (its arrays are read after the runtime's wait); logits are copied now
            top = self.top_k.enqueued(logits) if self.top_k is not None and wanted & set(TOP_K_OUTPUTS) else None
            host = to_numpy(logits) if LOGITS in wanted else None
            hand_over()  # ordered turns end here: the next instance's network waits for this one on the GPU
            return top, host

        t0 = time.perf_counter()
        with self.turns.take(getattr(self.runtime, "stream", None)) as hand_over:
            t_turn = time.perf_counter()
            top, host = self.runtime.infer_many([i.x for i in inputs], then=finish)
        t1 = time.perf_counter()
        launched = marks.get("launched", t1)
        # network: until the runtime handed the logits over (on a GPU, enqueued); top_k: the rest (on a GPU, its
        # kernel, the copies to the host and the wait for the network's GPU work)
        self.timer.add(
            sum(len(i) for i in inputs), turn_wait=t_turn - t0, network=launched - t_turn, top_k=t1 - launched
        )
        results, start = [], 0
        for i in inputs:
            stop = start + len(i)
            outputs = {}
            if top is not None and i.wanted & set(TOP_K_OUTPUTS):
                rows = self.top_k.outputs(top[0][start:stop], top[1][start:stop])  # type: ignore[union-attr]
                outputs.update((name, rows[name]) for name in TOP_K_OUTPUTS if name in i.wanted)
            if host is not None and LOGITS in i.wanted:
                outputs[LOGITS] = host[start:stop]
            results.append(outputs)
            start = stop
        return results

    def respond(self, outputs: dict[str, Any]) -> list[Any]:
        """A request's output tensors; the timer gets the BYTES ones (``LABELS``: ``respond_bytes``) and the numeric
        ones (``respond_numeric``) apart."""
        t0 = time.perf_counter()
        tensors = [bytes_tensor(name, rows) for name, rows in outputs.items() if is_bytes(rows)]
        t1 = time.perf_counter()
        tensors += [output_tensor(name, rows) for name, rows in outputs.items() if not is_bytes(rows)]
        self.timer.add(respond_bytes=t1 - t0, respond_numeric=time.perf_counter() - t1)
        return tensors

    def close(self) -> None:
        """The sessions, their CUDA graphs and buffers, in order (not at interpreter exit)."""
        self.turns.close()
        self.runtime.close()


class EmbedderModel:
    """One instance of ``embedder``."""

    def __init__(self, args: Mapping[str, str]) -> None:
        config = model_config(args)
        self.dtype = embedding_dtype(config)
        onnx = onnx_file(Path(args["model_repository"]) / args["model_version"])
        self.runtime = load_network(args, config, onnx, embeddings=self.dtype)
        log.info("embedder instance %s: runtime %s, %s", args["model_instance_name"], self.runtime.name, self.dtype)
        self.requests = RequestIsolation(args["model_name"], self.read, [row_batched(self.run)], self.respond)

    def execute(self, requests: Sequence[Any]) -> list[Any]:
        """One response per request, whatever happens."""
        return self.requests.execute(requests)

    def read(self, request: Any) -> Any:
        return input_array(request, "input")

    def run(self, inputs: Sequence[Any]) -> tuple[Any]:
        return (as_embeddings(self.runtime.infer_many(inputs), self.dtype),)

    def respond(self, outputs: Sequence[Any]) -> list[Any]:
        return [output_tensor(OUTPUT, outputs[0])]

    def close(self) -> None:
        """The sessions, their CUDA graphs and buffers, in order (not at interpreter exit)."""
        self.runtime.close()


class PostprocessModel:
    """One instance of a classifier's top-k step (``postprocess``; in the container it follows the TensorRT
    network, which answers logits): ``LOGITS`` to ``SCORES``, ``CLASS_IDS`` and ``LABELS``."""

    def __init__(self, args: Mapping[str, str]) -> None:
        config = model_config(args)
        self.top_k = TopK.from_config(config, Path(args["model_repository"]), classes_of="LOGITS")
        self.requests = RequestIsolation(args["model_name"], self.read, [row_batched(self.run)], self.respond)

    def execute(self, requests: Sequence[Any]) -> list[Any]:
        """One response per request, whatever happens."""
        return self.requests.execute(requests)

    def read(self, request: Any) -> Any:
        return to_numpy(input_array(request, "LOGITS"))

    def run(self, logits: Sequence[Any]) -> Any:
        return self.top_k(concat(logits))

    def respond(self, rows: Sequence[Any]) -> list[Any]:
        return named_tensors(self.top_k.outputs(*rows))

    def close(self) -> None:
        """Nothing to release: the top-k holds no device state of its own."""
