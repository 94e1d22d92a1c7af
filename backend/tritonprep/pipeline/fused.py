"""``classify_fused``: raw images in, top-k predictions out, in one Python-backend instance.

The ``classify`` ensemble runs two models, each its own process: ``preprocess`` (decode +
kernels) hands a GPU tensor to ``classifier`` (the network and its top-k; in the container a third,
``postprocess``, takes the logits). Every step pays the Python backend's per-request cost
(the request and its tensors cross into the stub and back, a GPU tensor through CUDA IPC), and
on one GPU the steps' processes time-slice the GPU between their CUDA contexts. This model does
the same three things in one process, per ``execute()``:

1. the images of all requests are decoded and preprocessed as one batch by the preprocess stage
   (:class:`~tritonprep.triton.preprocess.PreprocessStage`: the same spec parameters, limits,
   metrics and per-image errors as the ``preprocess`` model), left on the GPU executor's stream
   unsynchronized where the network runs on that stream too;
2. the batch of the requests whose images all decoded runs through the network
   (:func:`~tritonprep.classifier.runtimes.load_runtime`: on a GPU instance ONNX Runtime's CUDA EP
   with a session and CUDA graph per batch bucket, reading the executor's GPU batch where it is);
3. softmax and top-k run where the logits are (on the GPU for a GPU runtime; only the ``k`` scores and
   ids per image come to the host: :class:`~tritonprep.classifier.postprocess.TopK`, the classifier's),
   enqueued behind the network with their copy into pinned host memory; the runtime's one synchronize is the
   job's one wait for the GPU (with ONNX Runtime, on the executor's stream; a runtime on a stream of its own,
   TensorRT's, has the executor wait first).

These are the steps of one :class:`~tritonprep.triton.isolation.RequestIsolation`, so the errors are
``classify``'s too: a bad image fails its own request (``image i of n [reason]: ...``), a failure of
either step on the batch is retried request by request, a broken instance takes itself out of service.
Outputs are ``classify``'s: ``SCORES``, ``CLASS_IDS``, ``LABELS`` (``k`` = their dims).

Parameters: every preprocess parameter (see ``tritonprep.spec``) for the network's input, and the
classifier's runtime options (``tritonprep.classifier.runtimes``) prefixed with ``network.``;
``network.model`` is the ONNX file, relative to the model repository (default
``classifier/1/model.onnx``: the ``classifier`` model's own file, so the two serve one network);
``network.labels`` names the classes as the classifier's ``labels`` does (a file relative to the model
repository, as ``network.model``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..classifier.labels import PARAMETER as LABELS_PARAMETER
from ..classifier.postprocess import TopK
from ..classifier.runtimes import RuntimeOptions, load_runtime
from ..errors import ConfigError
from ..memory import CUDA_CONTEXT_MB, PARAMETER, instance_budget_mb
from ..spec import PreprocessConfig
from ..triton.health import report_loaded, server_ready_probe
from ..triton.isolation import RequestIsolation, row_batched
from ..triton.pb import model_config, parameters
from ..triton.preprocess import Preprocessed, PreprocessStage, RequestImages
from ..triton.responses import ImageRejected
from ..triton.tensors import named_tensors
from .networks import network_classes, warm_top_k

log = logging.getLogger(__name__)

#: the prefix of the network's parameters in the model config
NETWORK_PREFIX = "network."
#: the network file when the config names none, relative to the model repository
DEFAULT_NETWORK = "classifier/1/model.onnx"
#: the image output the preprocess spec describes (internal: it never leaves the process)
PIXELS = "PIXELS"


def split_parameters(params: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """``(preprocess parameters, network parameters)``: the ``network.`` ones lose their prefix."""
    prep = {k: v for k, v in params.items() if not k.startswith(NETWORK_PREFIX)}
    net = {k.removeprefix(NETWORK_PREFIX): v for k, v in params.items() if k.startswith(NETWORK_PREFIX)}
    return prep, net


def split_budget(budget_mb: int | None) -> tuple[int | None, int]:
    """An instance's ``gpu_memory_mb`` shared by its two parts: ``(the preprocessing's budget, the MiB the
    network leaves it)``. Both run in one CUDA context; the preprocessing gets a quarter of the rest."""
    if budget_mb is None:
        return None, 0
    prep_share = max(0, budget_mb - CUDA_CONTEXT_MB) // 4
    return CUDA_CONTEXT_MB + prep_share, prep_share


def shares_stream(runtime: object, executor: object) -> bool:
    """Whether the network runs on the executor's own CUDA stream, so work the executor leaves on it unawaited
    comes before the network's. False where either has no stream (a CPU executor or runtime) or they differ."""
    stream = getattr(executor, "stream", None)
    return stream is not None and getattr(runtime, "stream", None) is stream


class FusedClassifyModel:
    """One instance of ``classify_fused``: the preprocess stage, the network and top-k as the steps of one job."""

    def __init__(self, args: Mapping[str, str], input_name: str = "IMAGE") -> None:
        config = model_config(args)
        prep_params, net_params = split_parameters(parameters(config))
        repository = Path(args["model_repository"]).parent
        self.top_k = TopK.from_config(config, repository, labels_key=NETWORK_PREFIX + LABELS_PARAMETER)
        net_params.pop(LABELS_PARAMETER, None)
        max_batch = int(config.get("max_batch_size", 0))
        if max_batch < 1:
            raise ConfigError("classify_fused needs max_batch_size >= 1 (images travel along the batch dim)")
        network = repository / net_params.pop("model", DEFAULT_NETWORK)
        options = RuntimeOptions.from_parameters(net_params, max_batch)
        # one gpu_memory_mb for the instance: the preprocessing's share, and the network's arenas the rest
        budget = instance_budget_mb(prep_params.get(PARAMETER), options.batch_buckets)
        prep_budget, prep_share = split_budget(budget)
        if budget is not None:
            prep_params[PARAMETER] = str(prep_budget)
            options = RuntimeOptions.from_parameters({**net_params, PARAMETER: str(budget)}, max_batch)
        prep_config = PreprocessConfig.from_parameters(prep_params, [PIXELS])
        spec = prep_config.spec(PIXELS)
        # the preprocessing warms up (its decoders' first call: seconds) while the network's buckets take their
        # first runs on a thread; the network's CUDA-graph captures wait for both (a capture needs the process)
        self.prep = PreprocessStage(prep_config, args, input_name, warm_up=False)
        try:
            self.runtime = load_runtime(
                network,
                spec.output_shape,
                options=options,
                device_id=int(args["model_instance_device_id"]),
                use_gpu=self.prep.executor.name == "gpu",
                max_batch=max_batch,
                stream=getattr(self.prep.executor, "stream", None),  # the GPU executor's: one stream for the job
                shared_mb=prep_share,
                meanwhile=self.prep.warm_up,
                late_start=server_ready_probe(),  # its late buckets (network.late_batch_buckets) after the start
            )
            self.top_k.check_classes(network_classes(self.runtime, spec.output_shape))
            warm_top_k(self.top_k, self.runtime, spec.output_shape)
        except BaseException:  # the caller never gets this instance: release its GPU here
            try:
                if hasattr(self, "runtime"):
                    self.runtime.close()
            finally:
                self.prep.close()
            raise
        #: the network runs on the executor's stream: the pixels need not be waited for before it
        self.one_stream = shares_stream(self.runtime, self.prep.executor)
        self.requests = RequestIsolation(
            args["model_name"],
            self.read,
            [self.preprocess, row_batched(self.classify)],
            self.respond,
            on_rejections=self.prep.metrics.record_rejections,
            timer=self.prep.timer,
        )
        log.info("classify_fused instance %s: network %s on %s, top %d", args["model_instance_name"], network.name,
                 self.runtime.name, self.top_k.k)  # fmt: skip
        report_loaded(
            args,
            runtime=f"{self.prep.executor.name} executor + {self.runtime.name}",
            buckets=options.batch_buckets if self.runtime.on_gpu else (),
            gpu_memory_mb=str(budget) if budget is not None else None,
            timings=self.timings,
        )

    def execute(self, requests: Sequence[Any]) -> list[Any]:
        """One response per request, whatever happens."""
        with self.prep.executing(len(requests)):
            return self.requests.execute(requests)

    def read(self, request: Any) -> RequestImages:
        """A request's images; every request wants the network input (its own outputs are computed from it)."""
        return self.prep.read(request, wanted=frozenset({PIXELS}))

    def preprocess(self, inputs: list[RequestImages]) -> list[Preprocessed | ImageRejected]:
        """The preprocess stage's step; on one stream with the network, its GPU work is not waited for."""
        return self.prep.preprocess(inputs, synchronize=not self.one_stream)

    def classify(self, parts: list[Preprocessed]) -> tuple[np.ndarray, np.ndarray]:
        """Top-k probabilities and class ids of the network over the requests' pixels, one after the other,
        computed where the logits are, behind the network (the runtime waits once for both)."""
        return self.runtime.infer_many([p.outputs[PIXELS] for p in parts], then=self.top_k.enqueued)

    def respond(self, rows: Sequence[np.ndarray]) -> list[Any]:
        """One request's output tensors from its rows of :meth:`classify`'s outputs."""
        return named_tensors(self.top_k.outputs(*rows))

    @property
    def timings(self) -> dict[str, float]:
        """Seconds of each start-up phase: the preprocessing's (``prep.``) and the network's (``network.``)."""
        prep = getattr(self.prep.executor, "timings", {})
        return {
            **{f"prep.{k}": v for k, v in prep.items()},
            **{f"network.{k}": v for k, v in self.runtime.timings.items()},
        }

    def close(self) -> None:
        """Release the network (its sessions run on the executor's stream), then send the last metrics and
        release the executor's threads, decoders and device memory."""
        try:
            self.runtime.close()
        finally:
            self.prep.close()
