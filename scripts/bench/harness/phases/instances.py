"""Phase ``instances``: instance counts per model, and MPS's per-client share of the SMs, by measurement.

Serves a benchmark copy of the repository for every combination of ``--instances`` (e.g.
``"preprocess=2,4;classifier=1,2;postprocess=1,4;classify_fused=2,4"``; a model not named keeps its shipped count)
and of ``--mps-threads`` (``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` in the server's environment: each MPS client's share
of the SMs; it only matters under MPS, so run the phase with ``--mps on``) and of ``--classifier-batching``
(``shipped,none,delay2000``: the classifier's preferred batch sizes kept or dropped, or kept with the dynamic
batcher waiting up to that many microseconds to fill one) and of ``--classifier-turns`` (``shipped,off``: the
classifier's instances taking turns at the GPU's network, as shipped, or running their networks side by side) and of
``--classifier-parameter`` (``KEY=shipped,VALUE,...``: one more parameter of the classifier's configs, e.g.
``fuse_conv_bias=shipped,true``, or ``batch_buckets=shipped,1+64`` where a value holds commas; ``classify_fused``
takes it as ``network.KEY`` where it declares that; ``MODEL:KEY=...`` names another model's, e.g.
``preprocess:mps_active_thread_percentage=shipped,40``), and measures ``classify`` and ``classify_fused``
(``--instance-models``; ``prep_sink``, the preprocessing alone, ``null_classify``, the classifier behind a
preprocessing that does no work, and ``embed``, whose embedder ``embedder:KEY`` changes, where named) at 8
images/request (c=64), 32 (c=16) and one image at c=16 and c=1 on each. With ``prep_sink`` the copy also holds it
and its ``sink`` (2 instances), with ``null_classify`` it and ``null_prep`` (preprocess's instance count), so the
other models' memory and start are not those of a run without them; with ``embed``, the embedder (and ``analyze``).
The ``sink`` is a second consumer of ``PIXELS`` in tritonserver's CUDA pool: with the harness's pool the launcher's
admission halved the classifier's queue (97 to 44 requests), and 8 images/request at c=64 was refused, "Exceeds
maximum queue size", for ``prep_sink`` on every server (stages 19, 21); the embedder's queue is another. So such a
server gets the pool once more for each (:func:`server_options`), and each consumer the queue the classifier gets
alone; its memory at ready holds the larger pool. A point refused has no row. The report ranks the combinations per
model by throughput, with each one's c=1 p50, peak memory and launch to ready.
"""

from __future__ import annotations

import argparse
import logging
import re
from pathlib import Path

from scripts.bench import decode_once
from tritonprep.classifier.runtimes import RUNTIME_PARAMETERS
from tritonprep.cuda import MPS_THREADS_ENV
from tritonprep.parameters import MPS_PARAMETERS
from tritonprep.spec.table import TABLE as PREPROCESS_TABLE

from ..repos import (
    NULL_CLASSIFY_MODELS,
    PREP_SINK_MODELS,
    SOURCE,
    make_repo,
    with_parameter,
    with_queue_delay,
    without_preferred_batch_sizes,
)
from ..run import Run
from ..serving import BENCH_OPTIONS
from ..settings import Setting, instance_grid, instances_label, parse_instances, parse_percentages

log = logging.getLogger("harness")

#: the network models' runtime parameters, which their configs may leave at their defaults
RUNTIME_TABLE = frozenset(p.name for p in RUNTIME_PARAMETERS)

#: (images per request, concurrencies) measured on each combination: throughput at 8 and 32 images/request; one
#: image at c=16, where the network's batches hold 7-63 images (what a bucket set pads), and at c=1 (latency)
INSTANCE_POINTS = [(8, [64]), (32, [16]), (1, [16]), (1, [1])]
MODELS = ("classify", "classify_fused", "prep_sink", "null_classify", "embed")
#: the value of ``--classifier-parameter`` that sets a parameter to the empty string (``late_batch_buckets=empty``)
EMPTY = "empty"
#: the models measured where ``--instance-models`` names none
DEFAULT_MODELS = ("classify", "classify_fused")
_SHORT = {"preprocess": "p", "classifier": "c", "postprocess": "pp", "classify_fused": "f"}
#: the models each measured model runs: a parameter changed in any of them labels its rows
RUNS = {
    "classify": ("classify", "preprocess", "classifier"),
    "classify_fused": ("classify_fused",),
    "prep_sink": ("prep_sink", "preprocess"),
    "null_classify": ("null_classify", "null_prep", "classifier"),
    "embed": ("embed", "preprocess", "embedder"),
}
#: the measured models that are a second consumer of tritonserver's CUDA pool besides the classifier's queue
POOL_CONSUMERS = ("prep_sink", "embed")


def changes(model: str, changed: list[str]) -> bool:
    """Whether measuring ``model`` runs one of the ``changed`` models (``classify`` runs the classifier)."""
    return any(m in changed for m in RUNS.get(model, (model,)))


def models_of(args: argparse.Namespace) -> list[str]:
    """The models ``--instance-models`` names (default: :data:`DEFAULT_MODELS`), in :data:`MODELS` order."""
    given = getattr(args, "instance_models", "") or ",".join(DEFAULT_MODELS)
    wanted = {m.strip() for m in given.split(",") if m.strip()}
    unknown = sorted(wanted - set(MODELS))
    if unknown:
        raise ValueError(f"--instance-models: unknown model(s) {unknown}; known: {', '.join(MODELS)}")
    return [m for m in MODELS if m in wanted]


def tag_of(counts: dict[str, int], percentage: int | None) -> str:
    """A server tag such as ``inst-p4-c2-t50`` (``inst-shipped`` for the shipped counts)."""
    parts = [f"{_SHORT[m]}{n}" for m, n in counts.items()] or ["shipped"]
    return "-".join(["inst", *parts, *([f"t{percentage}"] if percentage is not None else [])])


def label_of(counts: dict[str, int], percentage: int | None) -> str:
    """``preprocess x4, classifier x2, MPS threads 50 %``."""
    return instances_label(counts) + (f", MPS threads {percentage} %" if percentage is not None else "")


#: ``--classifier-batching`` values: the shipped config's preferred batch sizes, or none; ``delayN`` besides: kept, with
#: ``max_queue_delay_microseconds: N`` (the shipped 0 sends whatever is queued when an instance is free)
BATCHING = ("shipped", "none")
_DELAY = re.compile(r"delay(\d+)$")
#: ``--classifier-turns`` values: the shipped ``network_turns``, or ``off`` (the networks side by side)
TURNS = ("shipped", "off")


def axis_values(args: argparse.Namespace, option: str, known: tuple[str, ...]) -> list[str]:
    """The values of the comma-list ``option`` (e.g. ``--classifier-turns``), in the order given (default:
    ``shipped`` only); :class:`ValueError` naming those not in ``known``."""
    given = getattr(args, option.removeprefix("--").replace("-", "_"), "") or "shipped"
    values = [v.strip() for v in given.split(",") if v.strip()]
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise ValueError(f"{option}: unknown value(s) {unknown}; known: {', '.join(known)}")
    return values


def batchings_of(args: argparse.Namespace) -> list[str]:
    """The ``--classifier-batching`` values, in the order given (default: the shipped config only)."""
    given = getattr(args, "classifier_batching", "") or "shipped"
    delays = tuple(v.strip() for v in given.split(",") if _DELAY.match(v.strip()))
    return axis_values(args, "--classifier-batching", BATCHING + delays)


def queue_delay_us(batching: str) -> int | None:
    """The classifier's queue delay a ``--classifier-batching`` value sets (``delay2000``: 2000), else None."""
    found = _DELAY.match(batching)
    return int(found.group(1)) if found else None


def turns_of(args: argparse.Namespace) -> list[str]:
    """The ``--classifier-turns`` values, in the order given (default: the shipped config only)."""
    return axis_values(args, "--classifier-turns", TURNS)


def parameter_axis(args: argparse.Namespace) -> tuple[str, list[str]]:
    """``(key, values)`` of ``--classifier-parameter KEY=V1,V2`` (``shipped``: the config's own value; ``empty``: the
    empty string; a value's own commas are written ``+``: ``batch_buckets=shipped,1+64``; ``preprocess:KEY`` may be
    any preprocess parameter, one its config leaves at the default included); ``("", ["shipped"])`` without it;
    :class:`ValueError` for a malformed one. Several ``KEY=...`` joined by ``;`` vary together, value by value (lists
    of one length): the key and each value are then ``;``-joined, and a value of ``shipped`` for every key is
    ``shipped``."""
    given = (getattr(args, "classifier_parameter", "") or "").strip()
    if not given:
        return "", ["shipped"]
    axes = [_one_parameter(part.strip(), given) for part in given.split(";") if part.strip()]
    if len({len(items) for _, items in axes}) > 1:
        raise ValueError(f"--classifier-parameter: the keys joined by ';' need as many values each, got {given!r}")
    if len(axes) == 1:
        return axes[0]
    values = [";".join(v) if any(x != "shipped" for x in v) else "shipped" for v in zip(*(i for _, i in axes))]
    return ";".join(key for key, _ in axes), values


def _one_parameter(part: str, given: str) -> tuple[str, list[str]]:
    """``(key, values)`` of one ``KEY=V1,V2`` of ``--classifier-parameter``, checked against the configs."""
    key, sep, values = part.partition("=")
    items = [v.strip().replace("+", ",") for v in values.split(",") if v.strip()]
    if not sep or not key.strip() or not items:
        raise ValueError(f"--classifier-parameter: expected KEY=VALUE,VALUE (e.g. fuse_conv_bias=shipped,true), got "
                         f"{given!r}")  # fmt: skip
    model, _, name = key.strip().rpartition(":")
    declared = f'key: "{name}"' in (SOURCE / (model or "classifier") / "configs" / "gpu.pbtxt").read_text()
    if not declared and not known_default(model, name):
        raise ValueError(f"--classifier-parameter: the {model or 'classifier'}'s GPU config declares no parameter "
                         f"{name!r}")  # fmt: skip
    return key.strip(), items


def known_default(model: str, key: str) -> bool:
    """Whether ``model``'s configs may leave ``key`` at its default, so that the copy gets it: a preprocess parameter,
    or one of a network model's (``classifier``, ``embedder``: its runtime's, or its MPS client's)."""
    if model == "preprocess":
        return key in PREPROCESS_TABLE
    return model in ("", "classifier", "embedder") and (key in RUNTIME_TABLE or key in MPS_PARAMETERS)


def set_parameter(repo: Path, key: str, value: str) -> list[str]:
    """``key`` = ``value`` in the copy's classifier, and as ``network.<key>`` in its ``classify_fused`` where that
    declares it (the same network); ``MODEL:KEY`` in that model only; ``;``-joined keys and values (see
    :func:`parameter_axis`) each, but those ``shipped``; the models changed."""
    if ";" in key:
        changed: list[str] = []
        for one_key, one_value in zip(key.split(";"), value.split(";")):
            if one_value != "shipped":
                changed += [m for m in set_parameter(repo, one_key, one_value) if m not in changed]
        return changed
    model, _, key = key.rpartition(":")
    value = "" if value == EMPTY else value
    if model:
        if not (repo / model).is_dir():
            raise ValueError(f"--classifier-parameter {model}:{key}: this copy has no {model}; name a model that runs "
                             "it in --instance-models (embed for the embedder)")  # fmt: skip
        with_parameter(repo / model, key, value, add=known_default(model, key))
        return [model]
    with_parameter(repo / "classifier", key, value, add=known_default("", key))
    try:  # classify_fused's network where it declares the key (its MPS client is its preprocessing's)
        with_parameter(repo / "classify_fused", f"network.{key}", value)
    except ValueError:
        return ["classifier"]
    return ["classifier", "classify_fused"]


def plan(args: argparse.Namespace) -> list[tuple[dict[str, int], int | None, str, str, str]]:
    """Every (instance counts, thread percentage, classifier batching, classifier turns, classifier parameter value)
    to serve, in order."""
    counts, percentages = instance_grid(parse_instances(args.instances)), parse_percentages(args.mps_threads)
    values = parameter_axis(args)[1]
    return [
        (c, p, b, t, v)
        for c in counts
        for p in percentages
        for b in batchings_of(args)
        for t in turns_of(args)
        for v in values
    ]


def server_options(args: argparse.Namespace) -> dict[str, object] | None:
    """The server options of this phase's servers: the harness's (None), or with ``prep_sink`` or ``embed`` measured
    the harness's with its CUDA pool once more for each, whose room the ``sink``'s and the embedder's queues share
    with the classifier's (see the module's description)."""
    consumers = 1 + sum(m in POOL_CONSUMERS for m in models_of(args))
    if consumers == 1:
        return None
    return {**BENCH_OPTIONS, "cuda_memory_pool_mb": consumers * int(BENCH_OPTIONS["cuda_memory_pool_mb"])}


def instances_repo(dest: Path, args: argparse.Namespace, counts: dict[str, int]) -> Path:
    """The benchmark copy for one combination: the classify models with ``counts``, ``prep_sink`` with its ``sink``,
    ``null_classify`` with ``null_prep`` and ``embed`` with the embedder (and ``analyze``) where ``--instance-models``
    names them (``null_prep``, GPU instances of its own, only there)."""
    models = models_of(args)
    sinks = (*(PREP_SINK_MODELS if "prep_sink" in models else ()),
             *(NULL_CLASSIFY_MODELS if "null_classify" in models else ()))  # fmt: skip
    repo = make_repo(dest, with_classify=True, sinks=sinks, counts=counts)
    if "embed" in models:
        decode_once.add_models(repo, SOURCE)
    return repo


def served(run: Run, args: argparse.Namespace, setting: Setting) -> None:
    """One server per combination; each measured model at each point on it."""
    combos = plan(args)
    if args.mps_threads and setting.mps != "on":
        log.warning("--mps-threads sets %s, which only an MPS client reads; this setting is %s", MPS_THREADS_ENV,
                    setting.label)  # fmt: skip
    log.info("instances phase (%s): %d server(s)", setting.label, len(combos))
    key = parameter_axis(args)[0]
    for counts, percentage, batching, turns, value in combos:
        delay = queue_delay_us(batching)
        tag = (
            tag_of(counts, percentage)
            + ("-nopref" if batching == "none" else "")
            + (f"-{batching}" if delay is not None else "")
            + ("-noturns" if turns == "off" else "")
            + (f"-{key.replace(':', '-')}-{value.replace(',', '+')}".replace(";", "_") if value != "shipped" else "")
        )
        label = (
            label_of(counts, percentage)
            + (", no preferred batch sizes" if batching == "none" else "")
            + (f", classifier queue delay {delay} us" if delay is not None else "")
            + (", networks side by side" if turns == "off" else "")
        )
        env = {MPS_THREADS_ENV: str(percentage)} if percentage is not None else None
        repo = instances_repo(run.work / f"repo-{tag}", args, counts)
        if batching == "none":
            without_preferred_batch_sizes(repo / "classifier")
        if delay is not None:
            with_queue_delay(repo / "classifier", delay)
        if turns == "off":
            with_parameter(repo / "classifier", "network_turns", "off")
        changed = set_parameter(repo, key, value) if value != "shipped" else []
        with run.serve(tag, repo, setting, env=env, options=server_options(args)) as srv:
            for n, conc in INSTANCE_POINTS:
                for model in models_of(args):
                    text = label + (f", {key} {value}" if changes(model, changed) else "")  # what its configs got
                    run.sweep(f"{model} {text}", srv, model, [n], conc, kind="instances",
                              instances=instances_label(counts), mps_threads=percentage or "")  # fmt: skip
