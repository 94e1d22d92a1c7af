"""``classify_fused``: raw images in, top-k predictions out, in one Python-backend instance.

The ``classify`` ensemble runs three models, each its own process: ``preprocess`` (decode +
kernels) hands a GPU tensor to ``classifier`` (the network), which hands logits to
``postprocess`` (softmax, top-k, names). Every step pays the Python backend's per-request cost
(the request and its tensors cross into the stub and back, a GPU tensor through CUDA IPC), and
on one GPU the steps' processes time-slice the GPU between their CUDA contexts. This model does
the same three things in one process, per ``execute()``:

1. the images of all requests are decoded and preprocessed as one batch by the preprocess
   executor (:class:`~tritonprep.triton.preprocess.PreprocessModel`: the same spec parameters,
   limits, metrics and per-image errors as the ``preprocess`` model);
2. the batch of the requests whose images all decoded runs through the network
   (:func:`~tritonprep.classifier.runtimes.load_runtime`: on a GPU instance ONNX Runtime's CUDA EP
   with a session and CUDA graph per batch bucket, reading the executor's GPU batch where it is);
3. the logits come to the host once (a few KB per image) for softmax and top-k.

Outputs are ``classify``'s: ``SCORES``, ``CLASS_IDS``, ``LABELS`` (``k`` = their dims). Errors are
too: a bad image fails its own request (``image i of n: ...``), a network failure on the batch is
retried request by request, a broken instance takes itself out of service.

Parameters: every preprocess parameter (see ``tritonprep.spec``) for the network's input, and the
classifier's runtime options (``tritonprep.classifier.runtimes``) prefixed with ``network.``;
``network.model`` is the ONNX file, relative to the model repository (default
``classifier/1/model.onnx``: the ``classifier`` model's own file, so the two serve one network).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..classifier.postprocess import imagenet_labels, top_k
from ..classifier.runtimes import RuntimeOptions, load_runtime
from ..errors import ConfigError, ImageError, RequestError
from ..executors import BatchResult
from ..spec import PreprocessConfig
from ..triton.pb import model_config, output_dims, parameters
from ..triton.preprocess import ImageBatch, PreprocessModel, gather_images
from ..triton.responses import batched_responses
from ..triton.tensors import bytes_tensor, output_tensor, to_numpy

log = logging.getLogger(__name__)

#: the prefix of the network's parameters in the model config
NETWORK_PREFIX = "network."
#: the network file when the config names none, relative to the model repository
DEFAULT_NETWORK = "classifier/1/model.onnx"
#: the image output the preprocess spec describes (internal: it never leaves the process)
PIXELS = "PIXELS"
OUTPUTS = ("SCORES", "CLASS_IDS", "LABELS")


def split_parameters(params: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """``(preprocess parameters, network parameters)``: the ``network.`` ones lose their prefix."""
    prep = {k: v for k, v in params.items() if not k.startswith(NETWORK_PREFIX)}
    net = {k.removeprefix(NETWORK_PREFIX): v for k, v in params.items() if k.startswith(NETWORK_PREFIX)}
    return prep, net


def _prefixed(error: ImageError, index: int, count: int) -> ImageError:
    """``error`` with ``image i of n:`` in front, as the preprocess model words it."""
    e = type(error)(f"image {index} of {count}: {error}")
    e.reason = error.reason
    return e


class FusedClassifyModel(PreprocessModel):
    """One instance of ``classify_fused``: the preprocess model with the network and top-k behind it."""

    def __init__(self, args: Mapping[str, str], input_name: str = "IMAGE") -> None:
        config = model_config(args)
        prep_params, net_params = split_parameters(parameters(config))
        dims = output_dims(config)
        missing = [name for name in OUTPUTS if name not in dims]
        if missing:
            raise ConfigError(f"classify_fused declares no output {missing}; it answers {list(OUTPUTS)} like classify")
        self.k = dims["SCORES"][0]
        if any(dims[name] != [self.k] for name in OUTPUTS):
            raise ConfigError(f"SCORES, CLASS_IDS and LABELS must all have dims [k]; the config has {dims}")
        network = Path(args["model_repository"]).parent / net_params.pop("model", DEFAULT_NETWORK)
        max_batch = int(config.get("max_batch_size", 0))
        spec = PreprocessConfig.from_parameters(prep_params, [PIXELS]).spec(PIXELS)
        if spec.layout != "NCHW" or spec.dtype != "FP32":
            raise ConfigError(
                f"the network takes FP32 NCHW input; the preprocess parameters give {spec.dtype} {spec.layout}"
            )
        # The preprocess layer sees the preprocess parameters and PIXELS, the network's input, as its output.
        prep_config = {
            **config,
            "parameters": {k: {"string_value": v} for k, v in prep_params.items()},
            "output": [{"name": PIXELS, "data_type": spec.triton_dtype, "dims": list(spec.output_shape)}],
        }
        super().__init__({**args, "model_config": json.dumps(prep_config)}, input_name=input_name)
        self.runtime = load_runtime(
            network,
            spec.output_shape,
            options=RuntimeOptions.from_parameters(net_params, max_batch),
            device_id=int(args["model_instance_device_id"]),
            use_gpu=self.executor.name == "gpu",
            max_batch=max_batch,
            stream=getattr(self.executor, "stream", None),  # the GPU executor's: one stream for the whole job
        )
        self.labels = imagenet_labels()
        log.info("classify_fused instance %s: network %s on %s, top %d", args["model_instance_name"], network.name,
                 self.runtime.name, self.k)  # fmt: skip

    def gather(self, requests: Sequence[Any]) -> ImageBatch:
        """Every request wants the network input (its own outputs are computed from it)."""
        batch = gather_images(requests, self.input_name, self.config.limits.max_images_per_request)
        batch.requested = [frozenset({PIXELS})] * len(batch.spans)
        return batch

    def respond(self, batch: ImageBatch, result: BatchResult, first_rows: Sequence[Mapping[str, int]]) -> list[Any]:
        """The network over the requests whose images all decoded, then top-k; one response per request."""
        pixels = result.outputs.get(PIXELS)
        t0 = time.perf_counter()

        def read(r: int) -> Any:
            start, stop = batch.spans[r]
            if r in batch.request_errors:
                raise batch.request_errors[r]
            bad = next((i for i in range(start, stop) if i in result.errors), None)
            if bad is not None:
                raise _prefixed(result.errors[bad], bad - start + 1, stop - start)
            if stop == start or pixels is None:
                raise RequestError("request carries no image")
            row = first_rows[r][PIXELS]
            return pixels[row : row + stop - start]

        responses = batched_responses(range(len(batch.spans)), read, self.classify, self.tensors, what="classify_fused")
        result.timings["network_s"] = time.perf_counter() - t0
        return responses

    def classify(self, parts: list[Any]) -> tuple[np.ndarray, np.ndarray]:
        """Top-k probabilities and class ids of the concatenated ``parts`` (one per request)."""
        scores, ids = top_k(to_numpy(self.runtime.infer_many(parts)), self.k)
        return scores, ids.astype(np.int32)

    def tensors(self, outputs: Sequence[np.ndarray]) -> list[Any]:
        """One request's output tensors from its rows of :meth:`classify`'s outputs."""
        scores, ids = outputs
        names = [[self.labels[c] for c in row] for row in ids]
        return [output_tensor("SCORES", scores), output_tensor("CLASS_IDS", ids), bytes_tensor("LABELS", names)]
