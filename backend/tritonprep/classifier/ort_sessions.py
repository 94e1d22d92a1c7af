"""How one batch bucket's ONNX Runtime CUDA session is made (:class:`BucketSessions`, for :mod:`.ort_cuda`).

Each session runs one batch size: the model's free batch dimension is fixed to the bucket, so ONNX Runtime
constant-folds the shape arithmetic. A session loads the optimized model an earlier start kept for its bucket
(graph optimizations then off), else optimizes the network now and keeps the result
(:class:`.ort_options.OptimizedModels`).
Every node runs on the GPU (CPU fallback disabled, no CPU thread pool); where ONNX Runtime cannot place a node there,
that is logged once and the sessions from then on fall back to the CPU for it. Where it refuses CUDA graphs for the
model, that is logged once and the sessions from then on run without graphs.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .ort_options import CudaEpOptions, OptimizedModels, batch_dim_name, quiet_provider_lookup, session_error

log = logging.getLogger(__name__)


class BucketSessions:
    """The sessions of one network file: ``provider`` holds the CUDA EP options every bucket shares (device, stream,
    layout), ``ep`` the per-bucket ones, ``caps_mb`` each bucket's arena cap (MiB, 0: none), ``sizes`` every bucket
    that may be made (to know whether the batch dimension's name must be read), ``preload_report`` what an error says
    of the CUDA libraries."""

    def __init__(
        self,
        ort: Any,
        onnx_path: Path,
        models: OptimizedModels | None,
        provider: Mapping[str, str],
        ep: CudaEpOptions,
        caps_mb: Mapping[int, int],
        sizes: Sequence[int],
        cuda_graphs: bool,
        preload_report: str = "",
    ) -> None:
        self.ort, self.onnx_path, self.models = ort, onnx_path, models
        self.provider, self.ep, self.caps_mb = dict(provider), ep, caps_mb
        self.preload_report = preload_report
        #: every node on the GPU (False once ONNX Runtime could not place one there)
        self.strict = True
        #: sessions capture CUDA graphs (False once ONNX Runtime refused to for this model)
        self.cuda_graphs = cuda_graphs
        kept = models is not None and all(models.path(size).is_file() for size in sizes)
        # read only where a bucket is optimized now (kept optimized models have their batch size fixed)
        self.dim_name = "" if kept else batch_dim_name(ort, onnx_path)

    def session(self, size: int) -> Any:
        """The session of bucket ``size``: from its optimized model kept by an earlier start where there is one, else
        optimized now (and kept)."""
        models = self.models
        if models is not None and models.path(size).is_file():
            try:
                return self._create(models.path(size), size, None)
            except Exception as e:  # noqa: BLE001 - ORT raises its own types: optimize now, keep nothing for it
                log.warning("bucket %d: its kept optimized model does not load (%s); not kept from now on", size, e)
                models.refuse(size)
                self.dim_name = self.dim_name or batch_dim_name(self.ort, self.onnx_path)
        save = models.saving(size) if models is not None and not models.refused(size) else None
        try:
            session = self._create(self.onnx_path, size, save)
        finally:
            if save is not None:
                models.keep(save, size)  # type: ignore[union-attr]
        return session

    def _provider(self, size: int) -> dict[str, str]:
        cap = self.caps_mb.get(size, 0)
        return {
            **self.provider,
            **self.ep.provider(size),  # per bucket: fuse_conv_bias may name some buckets only
            "enable_cuda_graph": "1" if self.cuda_graphs else "0",
            **({"gpu_mem_limit": str(cap << 20)} if cap else {}),
        }

    def _create(self, model: Path, size: int, save: Path | None) -> Any:
        """A session of ``model`` for bucket ``size``; ``save``: where ORT writes its optimized model (a model
        loaded from the cache is optimized already and loads with graph optimizations off)."""
        ort, errors = self.ort, []
        while True:
            options = ort.SessionOptions()
            if save is None and self.models is not None and model == self.models.path(size):
                options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
            else:
                options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
                options.add_free_dimension_override_by_name(self.dim_name, size)
                if save is not None:
                    options.optimized_model_filepath = str(save)
            options.log_severity_level = 3
            if self.strict:  # fail instead of running on the CPU: a missing CUDA library or a node the GPU cannot take
                options.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
                # every node on the GPU: no CPU thread pool (by default a spinning thread per core and session,
                # competing with the decoders' CPU work and the other instances' start)
                options.intra_op_num_threads = 1
                options.add_session_config_entry("session.intra_op.allow_spinning", "0")
            try:
                cpu = [] if self.strict else ["CPUExecutionProvider"]  # listing it conflicts with disabling it
                with quiet_provider_lookup(ort):
                    return ort.InferenceSession(
                        str(model), options, providers=[("CUDAExecutionProvider", self._provider(size)), *cpu]
                    )
            except Exception as e:  # noqa: BLE001 - ORT raises its own Fail/RuntimeException types
                text = str(e).strip()
                errors.append(f"{type(e).__name__}: {text.splitlines()[0] if text else ''}")
                if self.strict and "fallback to CPU EP has been explicitly disabled" in text:
                    log.warning(
                        "bucket %d: some nodes cannot run on the GPU; they run on the CPU (%s)", size, errors[-1]
                    )
                    self.strict = False
                elif self.cuda_graphs and "graph capture" in text.lower():
                    log.warning("bucket %d: ONNX Runtime refuses CUDA graphs for this model (%s)", size, errors[-1])
                    self.cuda_graphs = False
                else:
                    break
        raise session_error(model, errors, self.preload_report)
