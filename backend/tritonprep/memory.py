"""Per-instance GPU memory: the ``gpu_memory_mb`` parameter, and how an instance spends it.

A GPU model's config may carry ``parameters { key: "gpu_memory_mb" ... }``: the most GPU memory one
instance may hold, its CUDA context included, in MiB; either one number (``"900"``) or, for a network
with batch buckets, ``"<largest bucket>:<MiB>,..."`` (``"64:2200,32:1600"``): what an instance needs
with each largest bucket. The embedded launcher's budget plans with it and writes its choice (one
number) into the configs it serves; an instance reads it here (:func:`instance_budget_mb`) and caps
what it allocates to it: the ONNX Runtime arenas of its bucket sessions, the CuPy pool of its
preprocessing, the decoded images its decoders keep.

What an instance cannot cap, it reserves (:data:`CUDA_CONTEXT_MB` for the CUDA context and the
libraries' handles); what is left is spread over what it can. The figures are estimates from an
H100 (see docs); an instance reports what it chose in its instance report.
"""

from __future__ import annotations

from collections.abc import Sequence

from .errors import ConfigError

#: the parameter's name in every GPU model's config
PARAMETER = "gpu_memory_mb"
#: what a stub's CUDA context holds before it allocates anything (H100, CUDA 12/13 with lazy module
#: loading: ~500 MiB in nvidia-smi for a process that only created its context, the same under MPS)
CUDA_CONTEXT_MB = 512
#: the least an instance can work with besides its context
MIN_WORKING_MB = 64


def parse(text: str) -> dict[int | None, int]:
    """``{None: MiB}`` for one number, else ``{largest bucket: MiB}``; :class:`ConfigError` if malformed."""
    entries: dict[int | None, int] = {}
    items = [t.strip() for t in text.split(",") if t.strip()]
    try:
        for item in items:
            bucket, sep, mib = item.partition(":")
            if sep:
                entries[int(bucket)] = int(mib)
            else:
                entries[None] = int(bucket)
    except ValueError:
        entries = {}
    if not entries or (None in entries and len(entries) > 1) or any(v < 1 for v in entries.values()):
        raise ConfigError(
            f'{PARAMETER} must be MiB ("1800") or "<largest bucket>:<MiB>,..." ("64:1600,32:1200"); got {text!r}'
        )
    if any(k is not None and k < 1 for k in entries):
        raise ConfigError(f"{PARAMETER}: bucket sizes must be positive, got {text!r}")
    return entries


def instance_budget_mb(text: str | None, buckets: Sequence[int] = ()) -> int | None:
    """The MiB one instance may hold (None: no cap) from the parameter's ``text``.

    With ``"<largest bucket>:<MiB>,..."`` the entry of the instance's largest bucket counts; without one
    for it exactly, the entry of the next larger bucket (it needs no more than that), else the largest entry.
    """
    if text is None or not text.strip():
        return None
    entries = parse(text)
    if None in entries:
        return entries[None]
    largest = max(buckets) if buckets else max(k for k in entries if k is not None)
    keys = sorted(k for k in entries if k is not None)
    at_least = [k for k in keys if k >= largest]
    return entries[at_least[0] if at_least else keys[-1]]


def working_mb(budget_mb: int, reserved_mb: int, what: str) -> int:
    """``budget_mb`` less ``reserved_mb`` (the context and what the instance cannot cap), or :class:`ConfigError`
    naming ``what`` it is for and the least budget that works."""
    left = budget_mb - reserved_mb
    if left < MIN_WORKING_MB:
        raise ConfigError(
            f"{PARAMETER}={budget_mb} leaves {left} MiB for {what} after ~{reserved_mb} MiB for the CUDA context "
            f"and buffers the instance cannot cap; set it to at least {reserved_mb + MIN_WORKING_MB}"
        )
    return left
