"""The repository that tritonserver serves on GPUs: a copy of the model repository with the GPU memory budget's
choices and the admission's limits.

The launcher reads the config each model will use (``configs/<name>.pbtxt`` for ``--model-config-name``, else
``config.pbtxt``; parsed as Triton's ``ModelConfig``). Where the GPU memory budget is on (:mod:`.budget`), it
plans the GPU models that declare ``gpu_memory_mb``; then :mod:`.admission` sizes the queues and batch limits to
the CUDA memory pool. It serves a copy of the repository from the start's work folder: one folder per changed
model holding the rewritten config (the chosen ``instance_group`` count, ``batch_buckets`` /
``network.batch_buckets`` and ``gpu_memory_mb``, the MiB of one instance; ``max_batch_size`` and
``max_queue_size``) and symbolic links to everything else, the version folders included. Paths that
models build from ``args["model_repository"]`` resolve as in the original (``classify_fused`` reads
``<repository>/classifier/1/model.onnx``), and files a model writes beside its own (engine caches) land
in the original folders.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import memory
from ..errors import ServerError
from . import admission
from .admission import Admission
from .budget import Choice, Demand, Plan, parse_gpu_memory, plan

log = logging.getLogger(__name__)

GPU_MEMORY_PARAM = memory.PARAMETER
BUCKET_PARAMS = ("batch_buckets", "network.batch_buckets")
#: the parameters that may name bucket sizes (tritonprep.classifier.runtimes): kept to the buckets chosen
FUSE_PARAMS = ("fuse_conv_bias", "network.fuse_conv_bias")
#: the buckets made while the model serves: kept to sizes below the largest bucket chosen
LATE_PARAMS = ("late_batch_buckets", "network.late_batch_buckets")
CONFIG = "config.pbtxt"


def _pb() -> tuple[Any, Any]:
    """Triton's ModelConfig message and protobuf's text format (imported when a budget is planned)."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    return model_config_pb2, text_format


@dataclass
class ModelFile:
    """The config one model is served with."""

    model: str
    #: the config file, relative to the model's folder: config.pbtxt or configs/<name>.pbtxt
    relative: Path
    config: Any  # model_config_pb2.ModelConfig


def config_in_use(model_dir: Path, config_name: str | None) -> Path | None:
    """The config Triton reads for ``model_dir`` (relative to it), or None if it has none."""
    if config_name and (model_dir / "configs" / f"{config_name}.pbtxt").is_file():
        return Path("configs") / f"{config_name}.pbtxt"
    return Path(CONFIG) if (model_dir / CONFIG).is_file() else None


def read_models(repository: Path, config_name: str | None) -> list[ModelFile]:
    """The configs the models of ``repository`` are served with; :class:`ServerError` on one Triton cannot parse."""
    pb, text_format = _pb()
    found = []
    for model_dir in sorted(p for p in repository.iterdir() if p.is_dir() and not p.name.startswith(".")):
        relative = config_in_use(model_dir, config_name)
        if relative is None:
            continue
        config = pb.ModelConfig()
        try:
            text_format.Parse((model_dir / relative).read_text(), config)
        except (OSError, text_format.ParseError) as e:
            raise ServerError(f"cannot read {model_dir / relative}: {e}") from None
        found.append(ModelFile(model_dir.name, relative, config))
    return found


def _bucket_param(params: Any) -> str:
    present = [k for k in BUCKET_PARAMS if k in params]
    if present:
        return present[0]
    return "network.batch_buckets" if any(k.startswith("network.") for k in params) else "batch_buckets"


def _default_buckets(max_batch: int) -> tuple[int, ...]:
    """The runtime's buckets without a ``batch_buckets`` parameter: powers of two up to max_batch_size."""
    return tuple(1 << k for k in range(max_batch.bit_length()) if 1 << k < max_batch) + (max_batch,)


def demand_of(mf: ModelFile) -> Demand | None:
    """What ``mf`` asks of each GPU, or None if it is not a budgeted GPU model (no ``gpu_memory_mb``, or CPU only)."""
    pb, _ = _pb()
    params = mf.config.parameters
    if GPU_MEMORY_PARAM not in params:
        return None
    memory = parse_gpu_memory(params[GPU_MEMORY_PARAM].string_value, mf.model)
    gpu_kinds = (pb.ModelInstanceGroup.KIND_AUTO, pb.ModelInstanceGroup.KIND_GPU)
    groups = list(mf.config.instance_group)
    gpu_groups = [g for g in groups if g.kind in gpu_kinds]
    if groups and not gpu_groups:
        return None
    count = sum(max(g.count, 1) for g in gpu_groups) if gpu_groups else 1
    adjustable = len(gpu_groups) == 1 and not gpu_groups[0].gpus
    buckets: tuple[int, ...] = ()
    key = _bucket_param(params)
    if key in params and params[key].string_value.strip():
        try:
            buckets = tuple(int(v) for v in params[key].string_value.split(",") if v.strip())
        except ValueError:
            raise ServerError(f"{mf.model}: {key} must be comma-separated sizes") from None
    elif any(k is not None for k in memory):
        buckets = _default_buckets(max(mf.config.max_batch_size, 1))
    return Demand(mf.model, count, memory, buckets, adjustable)


def apply(mf: ModelFile, choice: Choice) -> None:
    """Write ``choice`` into ``mf``'s config."""
    params = mf.config.parameters
    gpu = [g for g in mf.config.instance_group if g.kind != _pb()[0].ModelInstanceGroup.KIND_CPU]
    if len(gpu) == 1 and choice.count != choice.asked_count:
        gpu[0].count = choice.count
    if choice.buckets:
        params[_bucket_param(params)].string_value = ",".join(map(str, choice.buckets))

        def stays_late(size: int) -> bool:  # a late 32 with the budget's largest bucket 32: a config that fails
            return size < max(choice.buckets) and size not in choice.buckets

        late: list[int] = []
        for key in (k for k in LATE_PARAMS if k in params):
            late += _kept(f"{mf.model}: {key}", params[key], stays_late, ",".join)
        for key in (k for k in FUSE_PARAMS if k in params):  # "64" with the 64 bucket gone: a config that fails
            _kept(f"{mf.model}: {key}", params[key], lambda v: v in choice.buckets or v in late, _fuse_text)
    params[GPU_MEMORY_PARAM].string_value = str(choice.gpu_memory_mb)


def _fuse_text(sizes: list[str]) -> str:
    """``fuse_conv_bias`` naming ``sizes``: ``false`` for none, and a lone 1 (which reads as "on") as ``1,``."""
    return "1," if sizes == ["1"] else ",".join(sizes) or "false"


def _kept(what: str, param: Any, keep: Callable[[int], bool], render: Callable[[list[str]], str]) -> list[int]:
    """Keep the sizes of a parameter naming bucket sizes that ``keep(size)`` accepts, written back by ``render`` (a
    parameter that is not a list of sizes, such as ``true``, stays); return the sizes kept."""
    sizes = [v.strip() for v in param.string_value.split(",") if v.strip()]
    if not sizes or not all(v.isdigit() for v in sizes):
        return []
    kept = [v for v in sizes if keep(int(v))]
    text = render(kept)
    if kept != sizes:
        log.info("%s %s with the budget's buckets (was %s)", what, text, ",".join(sizes))
    param.string_value = text
    return [int(v) for v in kept]


def plan_repository(models: list[ModelFile], budget_mb: int, fixed_mb: int) -> Plan:
    """The plan for the budgeted models among ``models``."""
    demands = [d for d in map(demand_of, models) if d is not None]
    return plan(demands, budget_mb, fixed_mb)


def write(repository: Path, dest: Path, models: list[ModelFile], chosen: Plan | None, admitted: Admission) -> Path:
    """Write the served copy of ``repository`` into ``dest`` (see the module's description), the budget's
    ``chosen`` already applied to ``models``, ``admitted`` applied here; return ``dest``."""
    _, text_format = _pb()
    rewritten: dict[str, tuple[Path, str]] = {}
    for mf in models:
        notes = []
        choice = chosen.choice(mf.model) if chosen is not None else None
        if choice is not None:  # applied by serve_copy, before the admission read the configs
            notes.append(
                f"the GPU memory budget's choice: {choice.count} instance(s) per GPU of {choice.gpu_memory_mb} MiB"
                + (f", batch buckets {','.join(map(str, choice.buckets))}" if choice.buckets else "")
            )
        if admission.apply(mf.config, mf.model, admitted):
            q = admitted.queue(mf.model)
            notes.append(
                "admission's limits (tritonprep.launcher.admission):"
                + (f" max_batch_size {mf.config.max_batch_size}" if mf.model in admitted.max_batch else "")
                + (f" max_queue_size {q.max_queue_size}" if q is not None else "")
            )
        if not notes:
            continue
        header = f"# Served by tritonprep's launcher for one server start: {repository / mf.model / mf.relative}\n"
        header += "".join(f"# with {note}\n" for note in notes)
        rewritten[mf.model] = (mf.relative, header + text_format.MessageToString(mf.config))
    dest.mkdir(parents=True, exist_ok=True)
    for entry in sorted(repository.iterdir()):
        target = dest / entry.name
        if entry.name not in rewritten:
            target.symlink_to(entry.resolve(), target_is_directory=entry.is_dir())
            continue
        relative, text = rewritten[entry.name]
        _link_tree(entry, target, relative)
        (target / relative).write_text(text)
    return dest


def _link_tree(source: Path, dest: Path, keep_out: Path) -> None:
    """``dest`` mirrors ``source`` with symbolic links, except ``keep_out`` (and the folders on its way)."""
    dest.mkdir()
    head = keep_out.parts[0]
    for child in sorted(source.iterdir()):
        if child.name == head and len(keep_out.parts) > 1:
            _link_tree(child, dest / child.name, Path(*keep_out.parts[1:]))
        elif child.name != head:
            (dest / child.name).symlink_to(child.resolve(), target_is_directory=child.is_dir())


def admission_of(models: list[ModelFile], pool_mb: int, gpus: int, front_timeout_ms: int | None = None) -> Admission:
    """The admission plan of ``models`` (:mod:`.admission`) served with a CUDA pool of ``pool_mb`` on ``gpus`` GPUs."""
    kinds = _pb()[0].ModelInstanceGroup
    configs = {m.model: m.config for m in models}
    return admission.plan(configs, pool_mb, gpus, (kinds.KIND_AUTO, kinds.KIND_GPU), front_timeout_ms)


def serve_copy(
    repository: Path,
    dest: Path,
    config_name: str | None,
    budget_mb: int | None,
    fixed_mb: int,
    pool_mb: int,
    gpus: int = 1,
    front_timeout_ms: int | None = None,
) -> tuple[Path, Plan | None, Admission]:
    """Plan the budget (unless ``budget_mb`` is None) and the admission for ``repository``, and write its served
    copy; (the copy, the budget's plan, the admission).

    :class:`ServerError` before anything is loaded when not even one instance of each GPU model fits, or the
    CUDA pool cannot hold one request between each ensemble's steps.
    """
    models = read_models(repository, config_name)
    chosen = plan_repository(models, budget_mb, fixed_mb) if budget_mb is not None else None
    if chosen is not None:  # the budget's buckets first: the admission reads the configs as they will be served
        for mf in models:
            choice = chosen.choice(mf.model)
            if choice is not None:
                apply(mf, choice)
    admitted = admission_of(models, pool_mb, gpus, front_timeout_ms)
    write(repository, dest, models, chosen, admitted)
    for c in chosen.choices if chosen is not None else ():
        if c.changed:
            log.info(
                "GPU memory budget: %s gets %d instance(s) per GPU%s instead of the config's %d%s",
                c.model,
                c.count,
                f" with buckets up to {c.buckets[-1]}" if c.buckets else "",
                c.asked_count,
                f" up to {c.asked_buckets[-1]}" if c.asked_buckets else "",
            )
    if chosen is not None:
        log.info("%s", chosen.describe())
    log.info("%s; serving %s", admitted.describe(), dest)
    return dest, chosen, admitted
