"""Benchmark copies of the model repository: the shipped configs with the harness's overrides.

Every copy has ``preprocess`` (the shipped GPU config, its instances, queue delay and decoders
overridable) and, where asked, the sinks (``sink``, ``null_prep`` and the ``prep_sink`` / ``null_sink``
ensembles), the classify models (``classifier``, ``postprocess``, ``classify``, ``classify_fused``) and
``null_classify`` (``null_prep`` into the classifier: classify without the preprocessing's work).
Queues are opened up (capacity, not overload protection, is measured), and instance counts can be set
per model in every config a server may pick (``config.pbtxt`` and ``configs/*.pbtxt``).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from scripts.bench import decode_once
from tritonprep_testkit.servers import REPO

HERE = Path(__file__).resolve().parents[1]  # scripts/bench
SOURCE = REPO / "model_repository"
SHIPPED_GPU_CONFIG = SOURCE / "preprocess" / "configs" / "gpu.pbtxt"
CLASSIFY_MODELS = ("classifier", "postprocess", "classify", "classify_fused")
SINK_MODELS = ("sink", "prep_sink", "null_prep", "null_sink")
#: the preprocessing into the sink alone, without the Python backend's ceiling (``null_prep``'s GPU instances)
PREP_SINK_MODELS = ("sink", "prep_sink")
#: classify with a preprocessing that does no work (``null_prep`` into the classifier; needs the classify models)
NULL_CLASSIFY_MODELS = ("null_prep", "null_classify")
#: every benchmark model a copy may hold besides preprocess and the classify models
BENCH_MODELS = (*SINK_MODELS, "null_classify")
_INSTANCE_GROUP = re.compile(r"instance_group \[.*?\]", re.S)


def _set(text: str, pattern: str, value: str) -> str:
    new, n = re.subn(pattern, value, text, flags=re.S)
    if n == 0:
        raise ValueError(f"{pattern!r} not found in the config")
    return new


def _param(text: str, key: str, value: str) -> str:
    line = f'parameters {{ key: "{key}" value: {{ string_value: "{value}" }} }}'
    if f'key: "{key}"' in text:
        return re.sub(rf'parameters \{{ key: "{key}" value: \{{ string_value: "[^"]*" \}} \}}', line, text)
    return text + line + "\n"


def model_configs(model_dir: Path) -> list[Path]:
    """Every config of a model that a server may pick: ``config.pbtxt`` and ``configs/*.pbtxt``."""
    return [p for p in [model_dir / "config.pbtxt", *sorted((model_dir / "configs").glob("*.pbtxt"))] if p.is_file()]


def instance_count(text: str) -> int:
    """The instance count of a config's (single) instance group."""
    group = _INSTANCE_GROUP.search(text)
    count = re.search(r"count: (\d+)", group.group(0)) if group else None
    if count is None:
        raise ValueError("no instance_group with a count in the config")
    return int(count.group(1))


def with_instances(text: str, count: int, kind: str | None = None) -> str:
    """The config with its instance group's count (and kind, if given) replaced."""
    group = _INSTANCE_GROUP.search(text)
    if group is None:
        raise ValueError("no instance_group in the config")
    old_kind = re.search(r"kind: (KIND_\w+)", group.group(0))
    new = f"instance_group [ {{ count: {count}, kind: {kind or (old_kind.group(1) if old_kind else 'KIND_AUTO')} }} ]"
    return text[: group.start()] + new + text[group.end() :]


def write_own(cfg: Path, text: str) -> None:
    """Write ``text`` to a copied config as a file of its own: a link to the source is replaced, never written
    through."""
    cfg.unlink()
    cfg.write_text(text)


def set_instance_count(model_dir: Path, count: int) -> None:
    """Set the instance count in every config of a copied model, keeping each config's kind (a linked config
    becomes a file of its own: the source is never written)."""
    for cfg in model_configs(model_dir):
        text = with_instances(cfg.read_text(), count)
        write_own(cfg, text)


def without_preferred_batch_sizes(model_dir: Path) -> None:
    """Drop ``preferred_batch_size`` from every config of a copied model (the dynamic batcher then sends whatever
    is queued); a linked config becomes a file of its own."""
    for cfg in model_configs(model_dir):
        text = re.sub(r"\n\s*preferred_batch_size:\s*(\[[^\]]*\]|\d+)", "", cfg.read_text())
        if re.search(r"^\s*preferred_batch_size", text, re.MULTILINE):
            raise ValueError(f"{cfg}: a preferred_batch_size line this harness cannot read; drop it by hand")
        write_own(cfg, text)


def with_queue_delay(model_dir: Path, microseconds: int) -> None:
    """Set ``max_queue_delay_microseconds`` in every config of a copied model that has a dynamic batcher (how long it
    may wait to fill a preferred batch size); a linked config becomes a file of its own. :class:`ValueError` if
    none has one."""
    texts = {cfg: re.subn(r"max_queue_delay_microseconds: \d+", f"max_queue_delay_microseconds: {microseconds}",
                          cfg.read_text()) for cfg in model_configs(model_dir)}  # fmt: skip
    if not any(n for _, n in texts.values()):
        raise ValueError(f"{model_dir}: no config sets max_queue_delay_microseconds")
    for cfg, (text, _) in texts.items():
        write_own(cfg, text)


def with_parameter(model_dir: Path, key: str, value: str, add: bool = False) -> None:
    """Set the string parameter ``key`` to ``value`` in every config of a copied model that declares it (``add``:
    in every config, appended where it is not declared: a parameter left at its default); a linked config becomes
    a file of its own. :class:`ValueError` if no config declares it and not ``add``."""
    pattern = re.compile(r'(parameters \{ key: "' + re.escape(key) + r'" value: \{ string_value: ")[^"]*(" \} \})')
    changed = 0
    configs = model_configs(model_dir)
    texts = {cfg: pattern.subn(lambda m: m.group(1) + value + m.group(2), cfg.read_text()) for cfg in configs}
    for cfg, (text, n) in texts.items():
        changed += n
        if add and not n:
            text = text.rstrip("\n") + f'\nparameters {{ key: "{key}" value: {{ string_value: "{value}" }} }}\n'
        write_own(cfg, text)
    if not changed and not add:
        raise ValueError(f"{model_dir}: no config declares parameter {key!r} in the one-line form this harness reads")


def make_repo(
    dest: Path,
    *,
    executor: str = "gpu",
    instances: int | None = None,
    queue_delay_us: int | None = None,
    hw_decoders: int | None = None,
    cpu_threads: int = 0,
    with_classify: bool = False,
    sinks: tuple[str, ...] = SINK_MODELS,
    counts: dict[str, int] | None = None,
) -> Path:
    """A repository with preprocess (the shipped GPU config, overridden where asked), the ``sinks`` (some of
    :data:`BENCH_MODELS`; ``null_prep`` with preprocess's instances and queue delay; ``null_classify`` with
    ``null_prep`` and the classify models) and the classify models where asked; ``counts`` sets the instance
    counts of models by name (``preprocess``, ``classifier``, ``postprocess``, ``classify_fused``)."""
    counts = dict(counts or {})
    if "preprocess" in counts:
        instances = counts.pop("preprocess") if instances is None else instances
    unknown = sorted(set(counts) - set(CLASSIFY_MODELS))
    if unknown or (counts and not with_classify):
        raise ValueError(f"instance counts for {unknown or sorted(counts)}: not classify models of this repository")
    if set(sinks) - set(BENCH_MODELS):
        raise ValueError(f"sinks {sorted(set(sinks) - set(BENCH_MODELS))}: not among {', '.join(BENCH_MODELS)}")
    if "null_classify" in sinks and ("null_prep" not in sinks or not with_classify):
        raise ValueError("null_classify runs null_prep into the classifier: it needs null_prep and with_classify")
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    shutil.copytree(SOURCE / "preprocess", dest / "preprocess", ignore=shutil.ignore_patterns("configs", "__pycache__"))
    text = SHIPPED_GPU_CONFIG.read_text()
    kind = "KIND_GPU" if executor == "gpu" else "KIND_CPU"
    count = instances or instance_count(text)
    text = with_instances(text, count, kind)
    if queue_delay_us is not None:
        text = _set(text, r"max_queue_delay_microseconds: \d+", f"max_queue_delay_microseconds: {queue_delay_us}")
    delay = int(re.search(r"max_queue_delay_microseconds: (\d+)", text).group(1))
    text = _param(text, "executor", executor)
    if hw_decoders is not None:
        text = _param(text, "hw_decoders", str(hw_decoders))
    if cpu_threads:
        text = _param(text, "cpu_threads", str(cpu_threads))
    (dest / "preprocess" / "config.pbtxt").write_text(text)
    decode_once.open_queues(dest / "preprocess")
    for model in sinks:
        shutil.copytree(HERE / "models" / model, dest / model)
    null_cfg = dest / "null_prep" / "config.pbtxt"
    if "null_prep" in sinks:
        null = with_instances(null_cfg.read_text(), count, "KIND_GPU")
        null_cfg.write_text(_set(null, r"max_queue_delay_microseconds: \d+", f"max_queue_delay_microseconds: {delay}"))
    sink_cfg = dest / "sink" / "config.pbtxt"
    if "sink" in sinks:
        sink_cfg.write_text(with_instances(sink_cfg.read_text(), 2, kind))
    # PIXELS as preprocess makes it (FP16 NHWC in the GPU config): the sink reads it, null_prep stands in for it
    pixels = re.search(r'name: "PIXELS"\s*data_type: (TYPE_\w+)\s*dims: (\[[^]]*\])', text)
    for cfg in (sink_cfg, null_cfg):
        if cfg.is_file():
            cfg.write_text(
                cfg.read_text().replace(
                    "data_type: TYPE_FP32 dims: [ 3, 224, 224 ]", f"data_type: {pixels[1]} dims: {pixels[2]}"
                )
            )
    if with_classify:
        for model in CLASSIFY_MODELS:
            shutil.copytree(SOURCE / model, dest / model, ignore=shutil.ignore_patterns("*.plan", "__pycache__"))
            decode_once.open_queues(dest / model)
        for model, n in counts.items():
            set_instance_count(dest / model, n)
    return dest


def shipped_copy(dest: Path) -> Path:
    """The shipped repository as shipped (every model, its instances, configs, queues and their timeouts), without
    engine plans or caches: what an overload measurement serves (the shipped bounds are what it measures)."""
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(
        SOURCE, dest, symlinks=True, ignore=shutil.ignore_patterns("*.plan", "__pycache__", "ort-trt-cache")
    )
    return dest


def open_copy(dest: Path) -> Path:
    """The shipped repository (every model, the shipped instances and configs) with its queues opened up and their
    timeouts off: what a capacity measurement serves (the shipped bounds would refuse part of the load)."""
    shipped_copy(dest)
    for model_dir in sorted(p for p in dest.iterdir() if p.is_dir()):
        decode_once.open_queues(model_dir)
        for cfg in model_configs(model_dir):
            if not cfg.is_symlink():
                cfg.write_text(
                    re.sub(r"default_timeout_microseconds: \d+", "default_timeout_microseconds: 0", cfg.read_text())
                )
    return dest


def repo_counts(repo: Path) -> dict[str, int]:
    """The instance count of each model of a repository in the config a GPU server picks (``configs/gpu.pbtxt``
    where there is one, else ``config.pbtxt``)."""
    found = {}
    for model_dir in sorted(p for p in repo.iterdir() if (p / "config.pbtxt").is_file()):
        gpu = model_dir / "configs" / "gpu.pbtxt"
        text = (gpu if gpu.is_file() else model_dir / "config.pbtxt").read_text()
        if _INSTANCE_GROUP.search(text):
            found[model_dir.name] = instance_count(text)
    return found
