"""Admission sized to GPU memory: how many images one GPU holds between ensemble steps, and the queue limits
that keep it so.

Pure planning on parsed model configs (Triton's ``ModelConfig``), no files and no GPU; :mod:`.served` applies the
plan to the configs it serves. In an ensemble, a GPU model's output that a later step reads (``preprocess``'s
``PIXELS``, read by ``classifier``) lives in tritonserver's CUDA memory pool from the moment its producer answers
until its consumer's execution has ended. When the pool runs out, Triton falls back to pinned and then to
pageable host memory, which a Python-backend stub cannot read: the request fails inside the server. So, per GPU::

    CUDA pool x (1 - MARGIN) >= sum over producers:  instances x max_batch_size x bytes of its outputs per image
                              + sum over consumers:  (instances x max_batch_size + max_queue_size x R) x bytes
                                                      of its inputs per image

where R, the largest request, is the ensembles' ``max_batch_size`` capped by the producer's
``max_images_per_request`` (one R for the whole repository: the smallest cap where producers set several). The
plan:

* caps each producer's ``max_batch_size`` (and every ensemble's that runs it) at R: a request of more images is
  refused at once by Triton, as the producer would refuse it anyway;
* caps each consumer's ``max_batch_size`` at its largest ``preferred_batch_size``, never below R (batches beyond
  it run as the same chunks, only later; an ensemble's steps must take its largest request);
* gives each consumer the largest ``max_queue_size`` up to its config's that fits: one request each first, then
  the pool's room shared in proportion to what the configs ask (a batching consumer without dynamic batching
  gets it, with its queue policy); a request over a full queue is refused with Triton's "Exceeds maximum queue
  size" (gRPC UNAVAILABLE, HTTP 503): at the front queue before anything ran, at a consumer's after the steps
  before it ran (Triton 2.51 has no ensemble-wide bound), never failed inside. A consumer Triton cannot queue
  with a bound (``max_batch_size`` 0 without dynamic batching, sequence batching, a nested ensemble) is shown as
  unbounded;
* with ``--queue-timeout-ms``, refuses a request that waited longer than that in the front queue (Triton's
  "Request timeout expired", the same status), which bounds the latency of the admitted ones (where the front
  model has dynamic batching to carry it, also with an unbounded queue);
* multiplies every queue by the GPUs one server serves (``--servers one`` over N GPUs: each GPU has its pool
  and instances; the queues are the server's, and the bound assumes Triton spreads the executions over the GPUs,
  as it does under load; a model pinned to some GPUs by its instance group is counted as if on each). The
  default, a server per GPU, has no such assumption.

If the pool cannot hold even one request in each consumer's queue, :func:`plan` refuses with a
:class:`ServerError` that says what pool would.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import ServerError

#: share of the CUDA pool the plan leaves free (the pool's own fragmentation, small outputs)
MARGIN = 0.05
#: the queue a consumer whose config sets no bound is weighed as, in requests, where no consumer sets one
UNBOUNDED_WEIGHT = 64
#: the producer parameter that caps the images of one request (tritonprep's preprocess models)
REQUEST_CAP_PARAM = "max_images_per_request"
_BYTES = {
    "TYPE_BOOL": 1,
    "TYPE_UINT8": 1,
    "TYPE_INT8": 1,
    "TYPE_UINT16": 2,
    "TYPE_INT16": 2,
    "TYPE_FP16": 2,
    "TYPE_BF16": 2,
    "TYPE_UINT32": 4,
    "TYPE_INT32": 4,
    "TYPE_FP32": 4,
    "TYPE_UINT64": 8,
    "TYPE_INT64": 8,
    "TYPE_FP64": 8,
}


def _type_name(config: Any, value: int) -> str:
    return str(type(config).DESCRIPTOR.file.enum_types_by_name["DataType"].values_by_number[value].name)


def tensor_bytes(config: Any, tensor: Any) -> int | None:
    """Bytes of one batch item of ``tensor`` (a ModelInput or ModelOutput of ``config``); None where unknown
    (variable dims, strings)."""
    size = _BYTES.get(_type_name(config, tensor.data_type))
    dims = list(tensor.dims)
    if size is None or any(d < 0 for d in dims):
        return None
    for d in dims:
        size *= d
    return size


@dataclass(frozen=True)
class Hop:
    """One tensor an ensemble hands from a GPU step to a later step."""

    producer: str
    output: str
    consumer: str
    input: str
    bytes_per_image: int
    #: the ensemble whose steps they are
    ensemble: str = ""


@dataclass(frozen=True)
class Queue:
    """The queue limit chosen for one model."""

    model: str
    max_queue_size: int
    #: the config's own
    asked: int
    #: "consumer" (its queue holds tensors in the pool), "front" (the first step of an ensemble) or "unbounded"
    #: (a consumer Triton cannot bound: no dynamic batching at max_batch_size 0, sequence batching, an ensemble)
    role: str
    timeout_us: int = 0


@dataclass(frozen=True)
class Admission:
    """What one server admits per GPU, and the limits written into its configs."""

    pool_mb: int
    gpus: int
    #: the largest request, in images
    largest_request: int
    hops: tuple[Hop, ...]
    #: bytes the executing batches may hold in the pool per GPU (producers' outputs, consumers' inputs)
    executing_bytes: int
    queues: tuple[Queue, ...]
    #: served max_batch_size of the models whose config's is lowered: model -> (served, config's)
    max_batch: Mapping[str, tuple[int, int]] = field(default_factory=dict)

    @property
    def usable_bytes(self) -> int:
        """Bytes of the pool the plan fills, per GPU."""
        return usable_bytes(self.pool_mb)

    @property
    def bytes_per_image(self) -> int:
        """Bytes one image holds between steps in the ensemble that hands the most (``analyze``: its pixels for
        the classifier and for the embedder)."""
        per: dict[str, dict[tuple[str, str], int]] = defaultdict(dict)
        for h in self.hops:
            per[h.ensemble][(h.producer, h.output)] = h.bytes_per_image
        return max((sum(tensors.values()) for tensors in per.values()), default=0)

    @property
    def images_per_gpu(self) -> int:
        """Images whose tensors between steps the pool holds at once, per GPU (of the ensemble that hands the
        most per image)."""
        largest = self.bytes_per_image
        return self.usable_bytes // largest if largest else 0

    def queue(self, model: str) -> Queue | None:
        """The queue chosen for ``model``, or None."""
        return next((q for q in self.queues if q.model == model), None)

    def describe(self) -> str:
        """One line for the start-up summary and the log."""
        if not self.hops:
            return "admission: no GPU tensors between ensemble steps; queues as configured"
        hops = ", ".join(sorted({f"{h.producer}.{h.output} {h.bytes_per_image / 1024:.0f} KiB" for h in self.hops}))
        queues = ", ".join(
            (f"{q.model} unbounded" if q.role == "unbounded" else f"{q.model} {q.max_queue_size or 'unbounded'}")
            + (f" [config: {q.asked}]" if q.max_queue_size != q.asked and q.role != "unbounded" else "")
            + (f" ({q.timeout_us / 1e6:g} s timeout)" if q.timeout_us else "")
            for q in self.queues
        )
        per = f" per GPU x {self.gpus}" if self.gpus > 1 else ""
        return (
            f"admission: CUDA pool {self.pool_mb} MiB per GPU holds {self.images_per_gpu} images between steps "
            f"({hops}; {self.bytes_per_image / 1024:.0f} KiB an image at most; requests up to "
            f"{self.largest_request} images); queue limits{per}: {queues}"
        )


def usable_bytes(pool_mb: int) -> int:
    """Bytes of a pool of ``pool_mb`` MiB that the plan fills, its margin left free."""
    return int((pool_mb << 20) * (1 - MARGIN))


def _steps(config: Any) -> list[Any]:
    return list(config.ensemble_scheduling.step) if config.platform == "ensemble" else []


def _gpu_model(config: Any, gpu_kinds: tuple[int, ...]) -> bool:
    groups = list(config.instance_group)
    return not groups or any(g.kind in gpu_kinds for g in groups)


def _instances(config: Any) -> int:
    """Instances per GPU: each group's count (Triton makes that many on each GPU the group names or sees)."""
    return sum(max(g.count, 1) for g in config.instance_group) or 1


def _queueable(config: Any) -> bool:
    """Whether Triton can bound the model's queue: dynamic batching, or a batching model it can be given to."""
    if config.platform == "ensemble" or config.HasField("sequence_batching"):
        return False
    return config.HasField("dynamic_batching") or config.max_batch_size > 0


def hops_of(configs: Mapping[str, Any], gpu_kinds: tuple[int, ...]) -> list[Hop]:
    """The tensors the ensembles of ``configs`` hand from a GPU model's output to a later step's input."""
    found: set[Hop] = set()
    for config in configs.values():
        produced: dict[str, tuple[str, str]] = {}
        for step in _steps(config):
            for output, tensor in step.output_map.items():
                produced[tensor] = (step.model_name, output)
        for step in _steps(config):
            for model_input, tensor in step.input_map.items():
                if tensor not in produced or step.model_name not in configs:
                    continue
                producer, output = produced[tensor]
                source = configs.get(producer)
                if source is None or not _gpu_model(source, gpu_kinds):
                    continue
                declared = next((o for o in source.output if o.name == output), None)
                size = tensor_bytes(source, declared) if declared is not None else None
                if size:
                    found.add(Hop(producer, output, step.model_name, model_input, size, config.name))
    return sorted(found, key=lambda h: (h.producer, h.output, h.consumer))


def _request_cap(configs: Mapping[str, Any], hops: list[Hop]) -> int:
    """The largest request the ensembles admit, in images."""
    ensembles = [c for c in configs.values() if c.platform == "ensemble" and c.max_batch_size > 0]
    largest = max((c.max_batch_size for c in ensembles), default=0)
    for producer in {h.producer for h in hops}:
        params = configs[producer].parameters
        if REQUEST_CAP_PARAM in params and params[REQUEST_CAP_PARAM].string_value.strip().isdigit():
            cap = int(params[REQUEST_CAP_PARAM].string_value)
            largest = min(largest, cap) if largest else cap
    return max(1, largest or max(configs[h.producer].max_batch_size for h in hops))


def _consumer_batch(config: Any) -> int:
    preferred = list(config.dynamic_batching.preferred_batch_size) if config.HasField("dynamic_batching") else []
    return min(config.max_batch_size, max(preferred)) if preferred and config.max_batch_size else config.max_batch_size


def plan(
    configs: Mapping[str, Any],
    pool_mb: int,
    gpus: int,
    gpu_kinds: tuple[int, ...],
    front_timeout_ms: int | None = None,
) -> Admission:
    """The admission of ``configs`` (model name -> ModelConfig) with a CUDA pool of ``pool_mb`` per GPU and
    ``gpus`` GPUs per server (see the module's description); ``front_timeout_ms``: the longest a request waits in
    the front queue before it is refused (None: the configs' timeouts)."""
    hops = hops_of(configs, gpu_kinds)
    if not hops:
        return Admission(pool_mb, gpus, 0, (), 0, ())
    request = _request_cap(configs, hops)
    max_batch: dict[str, tuple[int, int]] = {}
    out_bytes: dict[str, int] = defaultdict(int)  # producer -> bytes per image of all its handed outputs
    in_bytes: dict[str, int] = defaultdict(int)  # consumer -> bytes per image of all its handed inputs
    for h in {(h.producer, h.output): h for h in hops}.values():
        out_bytes[h.producer] += h.bytes_per_image
    for h in {(h.consumer, h.input): h for h in hops}.values():
        in_bytes[h.consumer] += h.bytes_per_image
    for producer in out_bytes:
        if configs[producer].max_batch_size > request:
            max_batch[producer] = (request, configs[producer].max_batch_size)
    for name, config in configs.items():
        runs = {s.model_name for s in _steps(config)}
        if runs & set(max_batch) and config.max_batch_size > request:
            max_batch[name] = (request, config.max_batch_size)
    for consumer in in_bytes:
        config = configs[consumer]
        batch = min(config.max_batch_size, max(_consumer_batch(config), request))  # the ensemble's request fits
        if batch < config.max_batch_size and consumer not in max_batch:
            max_batch[consumer] = (batch, config.max_batch_size)

    def batch_of(model: str) -> int:  # images (requests, at max_batch_size 0) one execution holds
        return max(1, max_batch[model][0] if model in max_batch else configs[model].max_batch_size)

    executing = sum(_instances(configs[p]) * batch_of(p) * b for p, b in out_bytes.items())
    executing += sum(_instances(configs[c]) * batch_of(c) * b for c, b in in_bytes.items())
    usable = usable_bytes(pool_mb)
    # the consumers whose queues can be bounded; a consumer without a bound (max_queue_size 0) weighs as the
    # largest bounded one (UNBOUNDED_WEIGHT if none) and gets what fits
    bound = sorted(c for c in in_bytes if _queueable(configs[c]))
    bounded = [_asked_queue(configs[c]) for c in bound if _asked_queue(configs[c])]
    asked = {c: _asked_queue(configs[c]) or max(bounded, default=UNBOUNDED_WEIGHT) for c in bound}
    # one queued request of a consumer: the largest request's images (one tensor at max_batch_size 0)
    per_request = {c: (request if configs[c].max_batch_size else 1) * in_bytes[c] for c in bound}
    room = usable - executing - sum(per_request.values())  # one request in each queue first
    if room < 0:
        need = -(-(executing + sum(per_request.values())) // usable_bytes(1))
        raise ServerError(
            f"the CUDA memory pool of {pool_mb} MiB per GPU cannot hold the tensors the ensembles hand between "
            f"steps: {executing >> 20} MiB for the executing batches and one request of {request} images in each "
            f"of {', '.join(bound) or 'no'} queue(s); raise --cuda-memory-pool-mb to at least {need}"
        )
    wanted = sum((asked[c] - 1) * per_request[c] for c in bound)
    queues = []
    for consumer in bound:
        share = room * (asked[consumer] - 1) * per_request[consumer] / wanted if wanted else 0
        size = min(asked[consumer], 1 + int(share // per_request[consumer]))
        config = configs[consumer]
        queues.append(Queue(consumer, size * gpus, _asked_queue(config), "consumer", _timeout(config)))
    for consumer in sorted(set(in_bytes) - set(bound)):
        queues.append(Queue(consumer, 0, _asked_queue(configs[consumer]), "unbounded"))
    fronts = {
        s.model_name
        for c in configs.values()
        for s in _steps(c)[:1]
        if s.model_name in configs and s.model_name not in in_bytes
    }
    for front in sorted(fronts):
        size = _asked_queue(configs[front])
        timeout = front_timeout_ms * 1000 if front_timeout_ms else _timeout(configs[front])
        if configs[front].HasField("dynamic_batching") and (size or timeout):
            queues.append(Queue(front, size * gpus, size, "front", timeout))
    return Admission(pool_mb, gpus, request, tuple(hops), executing, tuple(queues), max_batch)


def _asked_queue(config: Any) -> int:
    """The config's ``max_queue_size`` (0: unbounded, or no dynamic batching)."""
    if not config.HasField("dynamic_batching"):
        return 0
    return int(config.dynamic_batching.default_queue_policy.max_queue_size)


def _timeout(config: Any) -> int:
    if not config.HasField("dynamic_batching"):
        return 0
    return int(config.dynamic_batching.default_queue_policy.default_timeout_microseconds)


def apply(config: Any, model: str, admission: Admission) -> bool:
    """Write ``admission``'s limits for ``model`` into ``config``; True if it changed anything."""
    changed = False
    if model in admission.max_batch:
        config.max_batch_size = admission.max_batch[model][0]
        changed = True
    q = admission.queue(model)
    if q is not None and q.role != "unbounded":
        if not config.HasField("dynamic_batching"):  # a batching consumer (plan): its queue needs the policy
            config.dynamic_batching.SetInParent()
            changed = True
        policy = config.dynamic_batching.default_queue_policy
        if policy.max_queue_size != q.max_queue_size:
            policy.max_queue_size = q.max_queue_size
            changed = True
        if q.timeout_us and policy.default_timeout_microseconds != q.timeout_us:
            policy.default_timeout_microseconds = q.timeout_us
            policy.timeout_action = type(policy).REJECT
            changed = True
    return changed
