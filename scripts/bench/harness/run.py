"""One harness run: its images, its rows and summary (persisted after every step, so phases may run in separate
calls with the same ``--out``), perf_analyzer sweeps against a served repository, and the servers it starts."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any

from scripts import perf_sweep
from tritonprep_testkit import photos as bench_images

from . import serving
from .settings import DEFAULT, Setting
from .utilization import Utilization

log = logging.getLogger("harness")

PLANS = {
    "quick": {"sizes": ["500x375"], "interval": 2000},
    "full": {"sizes": ["500x375", "1280x720", "1920x1080", "3840x2160"], "interval": 2500},
}


class Run:
    """One harness run: images, rows and summary, persisted after every step."""

    def __init__(self, out: Path, plan: dict, interval: int | None, settings: list[Setting] | None = None) -> None:
        self.out, self.plan = out, plan
        self.interval = interval or plan["interval"]
        self.settings = settings or [DEFAULT]
        self.work = out / "work"
        self.rows: list[dict] = json.loads((out / "rows.json").read_text()) if (out / "rows.json").exists() else []
        self.summary: dict[str, Any] = (
            json.loads((out / "summary.json").read_text()) if (out / "summary.json").exists() else {}
        )
        self.sets, self.folders = self._load_sets()

    def _load_sets(self) -> tuple[dict[str, list[bytes]], dict[str, Path]]:
        sets: dict[str, list[bytes]] = {}
        folders: dict[str, Path] = {}
        for size in self.plan["sizes"]:
            count = 64 if size == "3840x2160" else 256
            folders[size] = self.work / "images" / size
            files = sorted(folders[size].glob("*.jpg"))
            if len(files) == count:
                sets[size] = [f.read_bytes() for f in files]
                continue
            sets[size] = bench_images.make_jpegs(*bench_images.SIZES[size], count, seed=42)
            folders[size].mkdir(parents=True, exist_ok=True)
            for i, b in enumerate(sets[size]):
                (folders[size] / f"{i:04d}.jpg").write_bytes(b)
        return sets, folders

    @property
    def servers(self) -> list[dict[str, Any]]:
        """The record of every server started (:func:`~.serving.serve`), across the calls with this ``--out``."""
        return self.summary.setdefault("servers", [])

    def save(self) -> None:
        """rows.json and summary.json, as they are now."""
        (self.out / "rows.json").write_text(json.dumps(self.rows))
        (self.out / "summary.json").write_text(json.dumps(self.summary, indent=1, default=str))

    @contextmanager
    def serve(
        self, tag: str, repo: Path, setting: Setting, env: dict[str, str] | None = None, **kw: Any
    ) -> Iterator[serving.Served]:
        """A ready server on ``repo`` with ``setting``, measured (:func:`~.serving.serve`); the run is saved after."""
        try:
            with serving.serve(self.out, self.servers, tag, repo, setting, env=env, **kw) as served:
                yield served
        finally:
            self.save()

    def measure(
        self,
        srv: serving.Served,
        model: str,
        batches: list[int],
        conc: list[int],
        size: str = "500x375",
        protocols: tuple[str, ...] = ("grpc",),
        interval: int | None = None,
        perf_out: Path | None = None,
        processes: int = 1,
        env: dict[str, str] | None = None,
        extra: list[str] | None = None,
    ) -> list[perf_sweep.Row]:
        """perf_analyzer at each (images per request, concurrency) against a served model (``processes`` of them
        at once, the concurrency split between them; ``env``: theirs; ``extra``: more of its options)."""
        return perf_sweep.sweep(model, srv.urls, self.sets[size], list(protocols), batches, conc,
                                interval or self.interval, perf_out or self.out / "perf", extra=extra,
                                admin_key=srv.admin_key, processes=processes, env=env,
                                stats_url=srv.stats_url)  # fmt: skip

    def sweep(
        self,
        label: str,
        srv: serving.Served,
        model: str,
        batches: list[int],
        conc: list[int],
        size: str = "500x375",
        kind: str = "triton",
        protocols: tuple[str, ...] = ("grpc",),
        interval: int | None = None,
        **extra: Any,
    ) -> list[dict]:
        """:meth:`measure`, each measurement a row (with its server's setting and ``extra``, the host's busy CPUs and,
        above c=1, the busiest GPU's utilization meanwhile: :class:`~.utilization.Utilization`), saved."""
        new = []
        for protocol, n, c in ((p, n, c) for p in protocols for n in batches for c in conc):
            with Utilization(gpu=c > 1) as util:
                res = self.measure(srv, model, [n], [c], size, (protocol,), interval)
            new += [{"kind": kind, "config": label, "size": size, **srv.setting.row_fields(), "server": srv.tag,
                     **extra, **asdict(r), "host_cpu_cores": util.host_cpu_cores(), "host_cpus": os.cpu_count(),
                     "gpu_busy": util.busy()} for r in res]  # fmt: skip
        for r in new:
            log.info("%s %s %s (%s) b%d c%d: %.0f img/s p50 %.2f ms", kind, label, size, r["setting"],
                     r["images_per_request"], r["concurrency"], r["images_per_s"], r["p50_ms"])  # fmt: skip
        self.rows.extend(new)
        self.save()
        return new

    def add_rows(self, rows: list[dict]) -> None:
        """Rows measured outside Triton (one process: no server setting), saved."""
        self.rows.extend(rows)
        self.save()
