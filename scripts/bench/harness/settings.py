"""The harness's axes, parsed from its options: server settings (MPS, GPU memory budget) and instance counts.

A :class:`Setting` is how the launcher runs one server: ``ServerOptions.mps`` and
``ServerOptions.gpu_memory_budget``, each either given or left to the launcher's default (None).
``--mps on,off --gpu-memory-budget 16G,off`` gives four settings; every served phase runs once per
setting, back to back. Pure functions: no server, no GPU.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
from collections.abc import Iterable
from dataclasses import dataclass

#: the values of ``ServerOptions.mps`` (launcher)
MPS_VALUES = ("auto", "on", "off")
#: a GPU memory budget: auto, off, or a size such as 16G, 12000M, 16GiB, 1.5T
_SIZE = re.compile(r"^\d+(\.\d+)?\s*([KMGT](i?B)?)$", re.IGNORECASE)
#: models whose instance counts the instances phase sets (their configs in the benchmark repository)
TUNABLE_MODELS = ("preprocess", "classifier", "postprocess", "classify_fused")


class OptionError(ValueError):
    """An option value the harness cannot use; the message says what to give instead."""


@dataclass(frozen=True)
class Setting:
    """How the launcher runs a server: MPS and the GPU memory budget; None leaves the launcher's default."""

    mps: str | None = None
    gpu_memory_budget: str | None = None

    @property
    def label(self) -> str:
        """``mps on, budget 16G``; ``default`` when both are the launcher's."""
        parts = []
        if self.mps is not None:
            parts.append(f"mps {self.mps}")
        if self.gpu_memory_budget is not None:
            parts.append(f"budget {self.gpu_memory_budget}")
        return ", ".join(parts) or "default"

    @property
    def suffix(self) -> str:
        """A file-name suffix: ``""`` for the default, else e.g. ``-mps-on-budget-16G``."""
        if self.label == "default":
            return ""
        return "-" + re.sub(r"[^A-Za-z0-9.]+", "-", self.label).strip("-")

    def server_options(self) -> dict[str, str]:
        """The ``ServerOptions`` fields this setting sets (none for the launcher's defaults)."""
        fields = {"mps": self.mps, "gpu_memory_budget": self.gpu_memory_budget}
        return {k: v for k, v in fields.items() if v is not None}

    def row_fields(self) -> dict[str, str]:
        """What each measured row carries of its setting."""
        return {"setting": self.label, "mps": self.mps or "", "budget": self.gpu_memory_budget or ""}


DEFAULT = Setting()


def _values(text: str | None) -> list[str]:
    return [v.strip() for v in (text or "").split(",") if v.strip()]


def parse_mps(text: str | None) -> list[str | None]:
    """``--mps on,off`` -> ``["on", "off"]``; nothing given -> ``[None]`` (the launcher's default)."""
    values = _values(text)
    bad = [v for v in values if v not in MPS_VALUES]
    if bad:
        raise OptionError(f"--mps: unknown value(s) {bad}; give a comma list of {', '.join(MPS_VALUES)}")
    if len(set(values)) != len(values):
        raise OptionError(f"--mps: {text!r} names a value twice")
    return list(values) or [None]


def parse_budgets(text: str | None) -> list[str | None]:
    """``--gpu-memory-budget 16G,off`` -> ``["16G", "off"]``; nothing given -> ``[None]``."""
    values = _values(text)
    bad = [v for v in values if v not in ("auto", "off") and not _SIZE.match(v)]
    if bad:
        raise OptionError(
            f"--gpu-memory-budget: {bad} is not auto, off or a size; give e.g. 16G, 12000M, 16GiB (comma list)"
        )
    if len(set(values)) != len(values):
        raise OptionError(f"--gpu-memory-budget: {text!r} names a value twice")
    return list(values) or [None]


def parse_settings(mps: str | None, budget: str | None) -> list[Setting]:
    """Every combination of the ``--mps`` and ``--gpu-memory-budget`` values, MPS varying fastest
    (so a budget's MPS on and off run back to back)."""
    return [Setting(m, b) for b, m in itertools.product(parse_budgets(budget), parse_mps(mps))]


def check_launcher_supports(settings: Iterable[Setting], fields: Iterable[str] | None = None) -> None:
    """Raise :class:`OptionError` if a setting needs a ``ServerOptions`` field this checkout's launcher lacks
    (``fields``: the field names; by default those of the installed ``ServerOptions``)."""
    if fields is None:
        from tritonprep.launcher.options import ServerOptions

        fields = [f.name for f in dataclasses.fields(ServerOptions)]
    have = set(fields)
    needed = [name for name in ("mps", "gpu_memory_budget") if any(name in s.server_options() for s in settings)]
    missing = [name for name in needed if name not in have]
    if missing:
        flags = ", ".join("--" + name.replace("_", "-") for name in missing)
        raise OptionError(
            f"this checkout's launcher has no {', '.join('ServerOptions.' + m for m in missing)} (tritonprep serve "
            f"--mps and --gpu-memory-budget come with the launcher's change for issues 24 and 25): merge it, or run "
            f"without {flags}"
        )


def parse_instances(text: str | None) -> dict[str, list[int]]:
    """``"preprocess=2,4;classifier=1,2"`` -> ``{"preprocess": [2, 4], "classifier": [1, 2]}``."""
    counts: dict[str, list[int]] = {}
    for part in filter(None, (p.strip() for p in (text or "").split(";"))):
        model, sep, values = part.partition("=")
        model = model.strip()
        if not sep or model not in TUNABLE_MODELS:
            raise OptionError(
                f"--instances: {part!r} is not MODEL=N[,N...] with MODEL one of {', '.join(TUNABLE_MODELS)} "
                '(e.g. "preprocess=2,4;classifier=1,2")'
            )
        if model in counts:
            raise OptionError(f"--instances: {model} is given twice")
        try:
            numbers = [int(v) for v in _values(values)]
        except ValueError:
            numbers = []
        if not numbers or min(numbers) < 1:
            raise OptionError(f"--instances: {model} needs instance counts of 1 or more, e.g. {model}=1,2")
        counts[model] = numbers
    return counts


def instance_grid(counts: dict[str, list[int]]) -> list[dict[str, int]]:
    """Every combination of the counts (one dict per repository to serve); ``[{}]`` for none (shipped counts)."""
    models = sorted(counts, key=TUNABLE_MODELS.index)
    return [dict(zip(models, combo)) for combo in itertools.product(*(counts[m] for m in models))]


def instances_label(counts: dict[str, int]) -> str:
    """``preprocess x4, classifier x2``; ``shipped counts`` for none."""
    return ", ".join(f"{m} x{n}" for m, n in counts.items()) or "shipped counts"


def parse_percentages(text: str | None) -> list[int | None]:
    """``--mps-threads 100,50`` -> ``[100, 50]`` (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE); nothing -> ``[None]``."""
    try:
        values = [int(v) for v in _values(text)]
    except ValueError as e:
        raise OptionError(f"--mps-threads: {text!r} is not a comma list of percentages (1-100)") from e
    if any(not 1 <= v <= 100 for v in values):
        raise OptionError(f"--mps-threads: {text!r}: each percentage must be 1-100")
    return list(values) or [None]


def parse_skip(text: str | None, known: Iterable[str]) -> set[str]:
    """``--skip`` as a set; an unknown name is an error (a typo would otherwise run what it meant to skip)."""
    values = set(_values(text))
    unknown = sorted(values - set(known))
    if unknown:
        raise OptionError(f"--skip: unknown part(s) {unknown}; known: {', '.join(sorted(known))}")
    return values


def parse_preprocess_config(text: str, option: str = "--config") -> tuple[int, int, int]:
    """``"2,0,2"`` -> ``(2, 0, 2)``: one preprocess configuration (instances, queue delay in microseconds,
    hardware decoders per instance), checked; ``option`` names the flag in the error."""
    try:
        n, delay, hw = (int(v) for v in text.split(","))
    except ValueError:
        raise OptionError(f"{option}: {text!r} is not INSTANCES,QUEUE_DELAY_US,HW_DECODERS (e.g. 2,0,2)") from None
    if n < 1 or delay < 0 or not 1 <= hw <= 8:
        raise OptionError(f"{option}: {text!r}: instances >= 1, queue delay >= 0, hardware decoders 1..8")
    return n, delay, hw


def parse_tune_grid(text: str | None) -> list[tuple[int, int, int]]:
    """``"2,0,2;4,0,1"`` -> ``[(2, 0, 2), (4, 0, 1)]``: :func:`parse_preprocess_config` for each ``;``-separated
    part, the tune phase's grid; nothing given -> ``[]`` (its own grid)."""
    return [parse_preprocess_config(p.strip(), "--tune-grid") for p in (text or "").split(";") if p.strip()]


def default_counts(visible: int) -> list[int]:
    """1, 2, 4, ... up to ``visible``, and ``visible`` itself."""
    counts, n = [], 1
    while n < visible:
        counts.append(n)
        n *= 2
    return counts + [visible] if visible else []


def parse_counts(text: str, visible: int) -> list[int]:
    """``--gpu-counts`` (the ``gpus`` and ``overload`` phases): a comma list of GPU counts from 1 to ``visible``
    (empty: :func:`default_counts`)."""
    if not text.strip():
        return default_counts(visible)
    counts = [int(v) for v in text.split(",") if v.strip()]
    bad = [c for c in counts if not 1 <= c <= visible]
    if bad:
        raise ValueError(f"--gpu-counts {text}: this machine shows {visible} GPU(s), so {bad} cannot be served")
    return counts
