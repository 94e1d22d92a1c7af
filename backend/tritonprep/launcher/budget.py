"""The GPU memory budget: how many instances of each GPU model, and which batch buckets, fit on one GPU.

Pure planning, no files and no GPU (:mod:`.served` reads the configs and writes what is chosen). Each GPU
model's config declares ``gpu_memory_mb``: the most GPU memory one instance may hold, its CUDA context
included, in MiB; one number, or for a network with batch buckets ``"<largest bucket>:<MiB>,..."``
(``"64:1600,32:1200"``: with buckets up to 64 an instance holds 1600 MiB, up to 32 1200 MiB). Every GPU
model gets its instance count on each GPU, so the budget is per GPU::

    tritonserver (FIXED: TRITON_MB + the CUDA memory pool) + sum(count x MiB per instance) <= budget

The configs' instance counts are the preferred ones. If they do not fit, :func:`plan` lowers counts one
instance at a time, always of the model that holds the most memory then (fair: the largest consumers give
first), down to one instance each; then the largest batch bucket, one declared step at a time, of the
model with the largest instances. If even one instance of each model at its smallest declared bucket
does not fit, it refuses with a :class:`ServerError` that names the models and their sizes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from .. import memory
from ..errors import ConfigError, ServerError

#: tritonserver's own GPU memory per GPU (its CUDA context and allocations), besides its CUDA memory pool
TRITON_MB = 1000
#: what ``auto`` leaves free of each GPU's total: the larger of these
MARGIN_MB, MARGIN_FRACTION = 512, 0.05
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*$", re.IGNORECASE)
_UNIT_MB = {"k": 1 / 1024, "": 1, "m": 1, "g": 1024, "t": 1024 * 1024}


def parse_size_mb(text: str) -> int:
    """MiB in ``text``: ``16G``, ``16GiB``, ``12000M``, ``12000`` (MiB); units are powers of 1024."""
    m = _SIZE.match(text)
    if m is None:
        raise ServerError(f"not a memory size: {text!r} (examples: 16G, 16GiB, 12000M)")
    return int(float(m[1]) * _UNIT_MB[m[2].lower()])


def parse_budget(text: str) -> str | int:
    """``--gpu-memory-budget``: "auto", "off" or MiB per GPU."""
    value = text.strip().lower()
    if value in ("auto", "off"):
        return value
    mb = parse_size_mb(text)
    if mb <= 0:
        raise ServerError(f"--gpu-memory-budget {text}: must be more than 0")
    return mb


def auto_budget_mb(total_mb: int) -> int:
    """The budget ``auto`` takes from a GPU's total memory: the total less a safety margin."""
    return total_mb - max(MARGIN_MB, int(total_mb * MARGIN_FRACTION))


def parse_gpu_memory(text: str, model: str = "") -> dict[int | None, int]:
    """A ``gpu_memory_mb`` declaration (:func:`tritonprep.memory.parse`: the instances read it the same way):
    ``{None: MiB}`` for one number, else ``{largest bucket: MiB}``; a :class:`ServerError` naming ``model``."""
    try:
        return memory.parse(text)
    except ConfigError as e:
        raise ServerError(f"{model}: {e}" if model else str(e)) from None


@dataclass(frozen=True)
class Demand:
    """One GPU model as its config asks: instances per GPU, batch buckets, and memory per instance."""

    model: str
    count: int
    memory: Mapping[int | None, int]
    #: the batch buckets the instance runs at (() for a model without)
    buckets: tuple[int, ...] = ()
    #: False where the counts cannot be changed (instance groups pinned to GPUs)
    adjustable: bool = True

    def steps(self) -> list[int | None]:
        """The largest buckets this model can run with, largest first (``[None]`` without buckets): its own
        largest bucket (capped at the largest declared), then each smaller declared one."""
        declared = sorted((k for k in self.memory if k is not None), reverse=True)
        if not declared:
            return [None]
        top = min(self.buckets[-1], declared[0]) if self.buckets else declared[0]
        return [top] + [k for k in declared if k < top]

    def per_instance(self, largest: int | None) -> int:
        """MiB one instance holds with buckets up to ``largest``."""
        if largest is None:
            return self.memory.get(None) or max(self.memory.values())
        fitting = [k for k in self.memory if k is not None and k >= largest]
        return self.memory[min(fitting)] if fitting else max(self.memory.values())

    def buckets_up_to(self, largest: int | None) -> tuple[int, ...]:
        """The batch buckets to run with when ``largest`` is the largest."""
        if largest is None or not self.buckets:
            return self.buckets
        kept = tuple(b for b in self.buckets if b <= largest)
        return kept if kept and kept[-1] == largest else (*kept, largest)


@dataclass(frozen=True)
class Choice:
    """What the budget chose for one model."""

    model: str
    count: int
    buckets: tuple[int, ...]
    gpu_memory_mb: int
    #: the config's own count and buckets, for the log
    asked_count: int = 0
    asked_buckets: tuple[int, ...] = ()

    @property
    def changed(self) -> bool:
        """True where the budget changed the config's count or buckets."""
        return self.count != self.asked_count or self.buckets != self.asked_buckets

    @property
    def total_mb(self) -> int:
        """MiB of all its instances on one GPU."""
        return self.count * self.gpu_memory_mb


@dataclass(frozen=True)
class Plan:
    """The chosen counts and buckets of every GPU model, per GPU."""

    budget_mb: int
    fixed_mb: int
    choices: tuple[Choice, ...] = field(default_factory=tuple)

    @property
    def used_mb(self) -> int:
        """MiB planned on each GPU: tritonserver and every instance."""
        return self.fixed_mb + sum(c.total_mb for c in self.choices)

    def choice(self, model: str) -> Choice | None:
        """The choice for ``model``, or None if it is not budgeted."""
        return next((c for c in self.choices if c.model == model), None)

    def describe(self) -> str:
        """One line: the budget, what fits, and what changed."""
        parts = []
        for c in self.choices:
            text = f"{c.model} {c.count}x{c.gpu_memory_mb} MiB"
            if c.buckets:
                text += f" (buckets up to {c.buckets[-1]})"
            if c.count != c.asked_count:
                text += f" [config: {c.asked_count}]"
            if c.buckets != c.asked_buckets and c.asked_buckets:
                text += f" [config: up to {c.asked_buckets[-1]}]"
            parts.append(text)
        return (
            f"GPU memory budget {self.budget_mb} MiB per GPU: {self.used_mb} MiB planned "
            f"(tritonserver {self.fixed_mb} MiB; {', '.join(parts) or 'no GPU model declares gpu_memory_mb'})"
        )


def plan(demands: Sequence[Demand], budget_mb: int, fixed_mb: int) -> Plan:
    """Counts and buckets of ``demands`` that fit ``budget_mb`` per GPU (see the module's description)."""
    counts = {d.model: d.count for d in demands}
    step = {d.model: 0 for d in demands}  # index into d.steps()

    def per_instance(d: Demand) -> int:
        return d.per_instance(d.steps()[step[d.model]])

    def used() -> int:
        return fixed_mb + sum(counts[d.model] * per_instance(d) for d in demands)

    while used() > budget_mb:
        fewer = [d for d in demands if d.adjustable and counts[d.model] > 1]
        if fewer:
            d = max(fewer, key=lambda d: (counts[d.model] * per_instance(d), per_instance(d), d.model))
            counts[d.model] -= 1
            continue
        smaller = [d for d in demands if step[d.model] + 1 < len(d.steps())]
        if smaller:
            d = max(smaller, key=lambda d: (per_instance(d), d.model))
            step[d.model] += 1
            continue
        sizes = ", ".join(f"{d.model} {counts[d.model]}x{per_instance(d)} MiB" for d in demands)
        raise ServerError(
            f"the GPU memory budget of {budget_mb} MiB per GPU cannot hold one instance of each GPU model at its "
            f"smallest batch buckets: tritonserver {fixed_mb} MiB + {sizes} = {used()} MiB. Serve on a GPU with "
            "more free memory, raise --gpu-memory-budget, lower gpu_memory_mb where the instances need less, "
            "or remove models from the repository"
        )
    choices = []
    for d in demands:
        largest = d.steps()[step[d.model]]
        choices.append(Choice(d.model, counts[d.model], d.buckets_up_to(largest), per_instance(d), d.count, d.buckets))
    return Plan(budget_mb, fixed_mb, tuple(choices))
