"""Which tritonservers a host runs: one per GPU (the default), one over every GPU, or one on the CPU.

The one place that turns ``--gpus``, ``CUDA_VISIBLE_DEVICES`` and ``--servers`` into a list of
:class:`Slot`s, each the share of the host one tritonserver serves. The launcher (:mod:`.host`), the
start-up summary and the tests derive counts, labels and bounds from it, so nothing assumes one GPU.

* ``per-gpu`` (the default): one slot per chosen GPU. Each tritonserver sees its GPU alone
  (``CUDA_VISIBLE_DEVICES``), so the decode, the preprocessing and the network of a request run on one
  GPU (Triton has no GPU affinity between the steps of an ensemble), and a fatal CUDA fault, which under
  CUDA MPS reaches every client of the GPUs a client links, costs one GPU's server.
* ``one``: one tritonserver over every chosen GPU (Triton puts each GPU model's instances on each), one
  failure domain; kept to compare against.
* No GPU: one CPU slot.

GPUs are numbered as this process sees them (after ``CUDA_VISIBLE_DEVICES``), as ``--gpus`` numbers them.
For tests on a machine without a GPU, :data:`FAKE_ENV` (``TRITONPREP_FAKE_GPUS=N``) makes ``per-gpu``
give N slots that serve on the CPU, so the per-GPU machinery (shared ports, one supervisor per server,
fault isolation) runs for real on CPU servers. It is ignored where a GPU is visible.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..errors import ServerError
from .install import visible_gpus
from .options import SERVER_LAYOUTS as LAYOUTS

#: tests only: on a machine without a GPU, this many CPU slots stand in for GPUs (``per-gpu`` only)
FAKE_ENV = "TRITONPREP_FAKE_GPUS"


@dataclass(frozen=True)
class Slot:
    """The share of the host that one tritonserver serves."""

    #: this process's indices of the GPUs it serves (() for a CPU slot, fake ones included)
    gpus: tuple[int, ...]
    #: their ``CUDA_VISIBLE_DEVICES`` entries (indices or UUIDs)
    devices: tuple[str, ...]
    #: how logs, metrics and the health endpoint name it: "gpu1", "gpus", "cpu"
    label: str
    #: a CPU slot that stands in for a GPU (:data:`FAKE_ENV`)
    fake: bool = False

    @property
    def on_gpu(self) -> bool:
        """Whether this slot's server sees a GPU."""
        return bool(self.gpus)


@dataclass(frozen=True)
class Topology:
    """The slots of a host, in GPU order."""

    slots: tuple[Slot, ...]
    layout: str

    @property
    def count(self) -> int:
        """How many tritonservers the host runs."""
        return len(self.slots)

    @property
    def shared_ports(self) -> bool:
        """Whether several servers share the HTTP and gRPC ports (SO_REUSEPORT)."""
        return self.count > 1

    @property
    def gpu_count(self) -> int:
        """How many GPUs the host serves on (a fake one counts as one)."""
        return sum(len(s.gpus) or int(s.fake) for s in self.slots)

    def describe(self) -> str:
        """One line: what serves where."""
        if self.count == 1:
            slot = self.slots[0]
            if not slot.on_gpu:
                return "one tritonserver on the CPU"
            return f"one tritonserver on GPU {','.join(map(str, slot.gpus))}"
        fake = " (fake GPUs: CPU servers)" if any(s.fake for s in self.slots) else ""
        return f"{self.count} tritonservers, one per GPU{fake}, on shared HTTP and gRPC ports"


def fake_gpus() -> int:
    """:data:`FAKE_ENV` as a count (0 when unset); a ServerError for a value that is not a small count."""
    text = os.environ.get(FAKE_ENV, "").strip()
    if not text:
        return 0
    if not text.isdigit() or not 0 < int(text) <= 16:
        raise ServerError(f"{FAKE_ENV}={text!r}: expected a count of fake GPUs from 1 to 16")
    return int(text)


def detect(gpus: tuple[int, ...] | None = None, layout: str = "per-gpu") -> Topology:
    """The slots for ``gpus`` (None: every GPU this process sees) laid out by ``layout``.

    A ServerError names an unknown layout or a GPU index this process does not see.
    """
    if layout not in LAYOUTS:
        raise ServerError(f"--servers must be one of {', '.join(LAYOUTS)}, got {layout!r}")
    devices = visible_gpus(gpus)
    indices = tuple(gpus) if gpus is not None else tuple(range(len(devices)))
    if not devices:
        fakes = fake_gpus() if layout == "per-gpu" else 0
        if fakes > 1:
            return Topology(tuple(Slot((), (), f"gpu{k}", fake=True) for k in range(fakes)), layout)
        return Topology((Slot((), (), "cpu"),), layout)
    if layout == "one" or len(devices) == 1:
        label = f"gpu{indices[0]}" if len(devices) == 1 else "gpus"
        return Topology((Slot(indices, tuple(devices), label),), layout)
    return Topology(tuple(Slot((i,), (d,), f"gpu{i}") for i, d in zip(indices, devices)), layout)
