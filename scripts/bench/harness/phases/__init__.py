"""The harness's phases, one module each: what runs once per run (one process, no server) and what runs once
per server setting (``--mps``, ``--gpu-memory-budget``), back to back on the same images.

Each module defines ``served(run, args, setting)`` and, where it has one-process parts, ``once(run, args)``.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass

from ..run import Run
from ..settings import Setting
from . import analyze, classify, fused, gpus, instances, latency, main, overload, soak, startstop, tune


@dataclass(frozen=True)
class Phase:
    """A phase: its per-setting part and its one-process part (None: it has none)."""

    served: Callable[[Run, argparse.Namespace, Setting], None]
    once: Callable[[Run, argparse.Namespace], None] | None = None


#: the phases by name, in the order the docs list them
PHASES: dict[str, Phase] = {
    "tune": Phase(tune.served),
    "main": Phase(main.served, main.once),
    "classify": Phase(classify.served, classify.once),
    "fused": Phase(fused.served),
    "instances": Phase(instances.served),
    "analyze": Phase(analyze.served),
    "soak": Phase(soak.served),
    "startstop": Phase(startstop.served),
    "gpus": Phase(gpus.served),
    "overload": Phase(overload.served),
    "latency": Phase(latency.served, latency.once),
}
