#!/usr/bin/env python3
"""perf_analyzer recipe for a running tritonprep server: a concurrency sweep with real JPEGs.

Builds perf_analyzer's ``--input-data`` JSON from a folder of images (every file a distinct
request payload, sent round-robin), runs one perf_analyzer measurement per
(protocol, images per request, concurrency), and prints the table users expect:
images/s, p50/p90/p99 latency, and the server-side queue / compute split that
perf_analyzer reads from Triton's statistics. All rows go to one CSV.

    python -m scripts.perf_sweep --images .cache/images/500x375 -m classify \\
        --protocol grpc,http --batch 1,8 --concurrency 1,4,16,64 --out perf-results/

The embedded server and the compose file restrict the model-config and statistics APIs
(which perf_analyzer needs) to clients with the admin header: pass its value with
``--admin-key-file`` or ``$TRITONPREP_ADMIN_KEY``, and the sweep hands perf_analyzer the
right ``-H`` header per protocol.

Image files: ``python -m scripts.bench_images --size 500x375 --count 256 --out DIR``.
Needs ``perf_analyzer`` on PATH (``pip install perf-analyzer``; its wheels are manylinux_2_38, so glibc
2.38 or later, or NVIDIA's ``tritonserver:<ver>-py3-sdk`` image). On an older glibc pip installs
perf-analyzer 0.1.0 instead, a placeholder without the program: the sweep says so in one line
(:func:`find_perf_analyzer`) and exits 2.
"""

from __future__ import annotations

import argparse
import base64
import csv
import importlib.metadata
import json
import logging
import os
import platform
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from tritonprep.launcher.options import ADMIN_HEADER, ADMIN_KEY_ENV, GRPC_HEADER_PREFIX

log = logging.getLogger("perf_sweep")
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp", ".bmp")
#: where perf_analyzer comes from where pip cannot install it
SDK_IMAGE = "nvcr.io/nvidia/tritonserver:<version>-py3-sdk"
#: the oldest glibc that PyPI's perf-analyzer wheels run on (manylinux_2_38)
PERF_ANALYZER_GLIBC = "2.38"


class PerfAnalyzerUnavailable(RuntimeError):
    """No perf_analyzer program to run; the message says how to get one."""


def find_perf_analyzer(name: str = "perf_analyzer") -> str:
    """The path of the perf_analyzer that ``name`` names (a path or a command on PATH).

    :class:`PerfAnalyzerUnavailable` in one line where there is none: pip's placeholder (perf-analyzer 0.1.0, a
    Python package without the program, which pip picks where the real wheels' glibc is newer than this
    machine's) or nothing at all, with the ways to get the real one.
    """
    found = shutil.which(name)
    if found is not None:
        return found
    glibc = platform.libc_ver()[1] or "unknown"
    ways = (
        f"use a machine with glibc >= {PERF_ANALYZER_GLIBC} (pip install perf-analyzer; this one has {glibc}), or "
        f"NVIDIA's {SDK_IMAGE} image, or pass --perf-analyzer PATH"
    )
    try:
        dist = importlib.metadata.distribution("perf-analyzer")
    except importlib.metadata.PackageNotFoundError:
        raise PerfAnalyzerUnavailable(f"no {name} on PATH: {ways}") from None
    raise PerfAnalyzerUnavailable(
        f"no {name} on PATH: the perf-analyzer {dist.version} that pip installed here is a placeholder without the "
        f"program (PyPI's real wheels need glibc >= {PERF_ANALYZER_GLIBC}); {ways}"
    )


@dataclass
class Row:
    """One perf_analyzer measurement."""

    model: str
    protocol: str
    images_per_request: int
    concurrency: int
    images_per_s: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    avg_ms: float
    server_queue_ms: float
    server_compute_ms: float
    client_overhead_ms: float
    #: per composing model of an ensemble: "name: queue q ms, compute c ms; ..."
    composing: str = ""
    #: per model that executed during the measurement (Triton's statistics): images per execute, compute split
    executes: str = ""
    #: perf_analyzer processes that made the load together (the concurrency split between them)
    processes: int = 1
    #: CPU cores the load generator used (its processes' CPU time over the wall time)
    client_cpu_cores: float = 0.0


def write_input_data(images: list[bytes], path: Path, input_name: str = "IMAGE") -> None:
    """perf_analyzer JSON: one entry per image, BYTES as base64 of Triton's length-prefixed element."""
    data = [
        {input_name: {"b64": base64.b64encode(struct.pack("<I", len(b)) + b).decode(), "shape": [1]}} for b in images
    ]
    path.write_text(json.dumps({"data": data}))


def load_images(folder: Path, limit: int) -> list[bytes]:
    files = sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)[:limit]
    if not files:
        raise SystemExit(f"no images in {folder}; make some with `python -m scripts.bench_images`")
    return [p.read_bytes() for p in files]


def _ms(rec: dict, key: str) -> float:
    return float(rec.get(key) or 0) / 1000.0  # perf_analyzer reports microseconds


def admin_header_args(protocol: str, admin_key: str | None) -> list[str]:
    """perf_analyzer's ``-H`` arguments that open the restricted APIs, or none without a key."""
    if not admin_key:
        return []
    name = GRPC_HEADER_PREFIX + ADMIN_HEADER if protocol == "grpc" else ADMIN_HEADER
    return ["-H", f"{name}:{admin_key}"]


def _command(
    pa: str, model: str, url: str, protocol: str, data_json: Path, batch: int, concurrency: int, interval_ms: int,
    name: str, extra: list[str],
) -> list[str]:  # fmt: skip
    return [pa, "-m", model, "-u", url, "-i", protocol, "--input-data", str(data_json), "-b", str(batch),
            "--concurrency-range", f"{concurrency}:{concurrency}", "--measurement-interval", str(interval_ms),
            "--stability-percentage", "20", "--max-trials", "5", "--percentile", "50", "-f", name, "--verbose-csv",
            *extra]  # fmt: skip


def _composing(folder: Path, name: str) -> str:
    """The composing models' queue and compute of an ensemble, from the CSVs perf_analyzer wrote beside ``name``."""
    parts = []
    for sub in sorted(folder.glob(f"*_v*.{name}")):
        with open(sub) as f:
            srec = next(csv.DictReader(f), None)
        if srec:
            sub_compute = (
                _ms(srec, "Server Compute Input")
                + _ms(srec, "Server Compute Infer")
                + _ms(srec, "Server Compute Output")
            )
            parts.append(
                f"{sub.name.split('_v')[0]}: queue {_ms(srec, 'Server Queue'):.2f} ms, compute {sub_compute:.2f} ms"
            )
    return "; ".join(parts)


def run_one(
    pa: str,
    model: str,
    url: str,
    protocol: str,
    data_json: Path,
    batch: int,
    concurrency: int,
    interval_ms: int,
    workdir: Path,
    extra: list[str],
    processes: int = 1,
    env: dict[str, str] | None = None,
) -> Row | None:
    """One measurement: ``processes`` perf_analyzers at once (the concurrency split between them; their images/s
    add up, their latencies are averaged, the worst p99 kept), or None if one of them failed."""
    name = f"pa-{protocol}-{batch}-{concurrency}.csv"
    shares = [concurrency // processes + (k < concurrency % processes) for k in range(processes)]
    folders = [workdir / f"p{k}" for k in range(processes)]
    procs = []
    t0 = time.monotonic()
    for folder, share in zip(folders, shares):
        folder.mkdir(exist_ok=True)
        for old in folder.glob(f"*{name}"):
            old.unlink()
        # run in the folder with a bare file name: perf_analyzer writes the composing models' statistics of an
        # ensemble beside it as "<model>_v<version>.<name>"
        cmd = _command(pa, model, url, protocol, data_json, batch, share, interval_ms, name, extra)
        log.debug("%s", " ".join(cmd))
        log_file = open(folder / f"{name}.out", "w+")  # noqa: SIM115 - read and closed below
        procs.append((subprocess.Popen(cmd, cwd=folder, stdout=log_file, stderr=subprocess.STDOUT,
                                       env={**os.environ, **(env or {})}), log_file))  # fmt: skip
    cpu_s = 0.0
    outputs = []
    for proc, log_file in procs:  # reaped here to read each one's own CPU time (not other children's)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        cpu_s += usage.ru_utime + usage.ru_stime
        log_file.seek(0)
        outputs.append(log_file.read())
        log_file.close()
    wall = time.monotonic() - t0
    cpu = cpu_s / max(wall, 1e-9)
    procs = [p for p, _ in procs]
    recs = []
    for proc, folder, output in zip(procs, folders, outputs):
        csv_path = folder / name
        if proc.returncode != 0 or not csv_path.is_file():
            log.error("perf_analyzer failed (%s c=%d b=%d): %s", protocol, concurrency, batch,
                      output.strip().splitlines()[-3:])  # fmt: skip
            return None
        with open(csv_path) as f:
            recs.append(next(csv.DictReader(f)))

    def mean(key: str) -> float:
        return sum(_ms(r, key) for r in recs) / len(recs)

    compute = mean("Server Compute Input") + mean("Server Compute Infer") + mean("Server Compute Output")
    return Row(
        model,
        protocol,
        batch,
        concurrency,
        sum(float(r["Inferences/Second"]) for r in recs),
        mean("p50 latency"),
        mean("p90 latency"),
        max(_ms(r, "p99 latency") for r in recs),
        mean("Avg latency"),
        mean("Server Queue"),
        compute,
        mean("Client Send") + mean("Client Recv"),
        _composing(folders[0], name),
        processes=processes,
        client_cpu_cores=round(cpu, 2),
    )


def print_table(rows: list[Row]) -> None:
    """The table on stdout (it is this script's output)."""
    header = (
        f"{'protocol':8} {'img/req':>7} {'conc':>5} {'img/s':>10} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} "
        f"{'queue ms':>9} {'compute ms':>10}"
    )
    out = [header, "-" * len(header)]
    for r in rows:
        out.append(
            f"{r.protocol:8} {r.images_per_request:>7} {r.concurrency:>5} {r.images_per_s:>10,.0f} {r.p50_ms:>8.2f} "
            f"{r.p90_ms:>8.2f} {r.p99_ms:>8.2f} {r.server_queue_ms:>9.2f} {r.server_compute_ms:>10.2f}  {r.composing}"
        )
    sys.stdout.write("\n".join(out) + "\n")


def model_stats(url: str, admin_key: str | None) -> dict[str, dict]:
    """Triton's cumulative statistics of every model (``{name: stats}``), from the HTTP endpoint; {} if unreadable."""
    try:
        import tritonclient.http as httpclient

        client = httpclient.InferenceServerClient(url)
        try:
            stats = client.get_inference_statistics(headers={ADMIN_HEADER: admin_key} if admin_key else None)
        finally:
            client.close()
    except Exception as e:  # noqa: BLE001 - the split is extra; the sweep's figures stand without it
        log.warning("model statistics unavailable at %s: %s", url, e)
        return {}
    return {m["name"]: m for m in stats.get("model_stats", [])}


def _split_ms(stats: dict, key: str) -> tuple[int, int]:
    """(executes, ns) of one compute phase, summed over the batch sizes Triton saw (``batch_stats``: per execute)."""
    rows = [b.get(key, {}) for b in stats.get("batch_stats", [])]
    return sum(int(r.get("count", 0)) for r in rows), sum(int(r.get("ns", 0)) for r in rows)


def executes_summary(before: dict[str, dict], after: dict[str, dict], models: list[str]) -> str:
    """Per model, between two :func:`model_stats` snapshots (taken around a whole perf_analyzer run: its warm-up
    and every trial count): images per execute and the mean compute split per execute (Triton's compute input /
    infer / output from its per-batch-size statistics), e.g.
    ``classifier: 125 img/execute, compute in 0.41 / infer 14.12 / out 2.10 ms``."""
    parts = []
    for name in models:
        a, b = after.get(name), before.get(name, {})
        if not a:
            continue
        executes = int(a.get("execution_count", 0)) - int(b.get("execution_count", 0))
        images = int(a.get("inference_count", 0)) - int(b.get("inference_count", 0))
        if executes <= 0:
            continue
        ms = []
        for key in ("compute_input", "compute_infer", "compute_output"):
            (count_a, ns_a), (count_b, ns_b) = _split_ms(a, key), _split_ms(b, key)
            ms.append((ns_a - ns_b) / (count_a - count_b) / 1e6 if count_a > count_b else 0.0)
        parts.append(f"{name}: {images / executes:.1f} img/execute, compute in {ms[0]:.2f} / infer {ms[1]:.2f} / "
                     f"out {ms[2]:.2f} ms")  # fmt: skip
    return "; ".join(parts)


def sweep(
    model: str,
    urls: dict[str, str],
    images: list[bytes],
    protocols: list[str],
    batches: list[int],
    concurrencies: list[int],
    interval_ms: int,
    out: Path,
    pa: str = "perf_analyzer",
    extra: list[str] | None = None,
    admin_key: str | None = None,
    processes: int = 1,
    env: dict[str, str] | None = None,
    stats_url: str | None = None,
) -> list[Row]:
    """Run the sweep; return the rows (also appended to ``out/perf.csv``).

    ``admin_key``: the value of the server's admin header, for its restricted statistics
    and model-config APIs. ``processes``: perf_analyzers per measurement (where one process cannot make the
    load; each takes its share of the concurrency). ``env``: more variables for perf_analyzer. ``stats_url``:
    where Triton's statistics API answers for the whole host (by default the HTTP URL; a host of several servers
    answers for all of them on its metrics port, the host endpoint).
    """
    out.mkdir(parents=True, exist_ok=True)
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as tmp:
        data_json = Path(tmp) / "input.json"
        write_input_data(images, data_json)
        for protocol in protocols:
            for batch in batches:
                for c in concurrencies:
                    stats_at = stats_url or urls.get("http")
                    before = model_stats(stats_at, admin_key) if stats_at else {}
                    row = run_one(
                        pa,
                        model,
                        urls[protocol],
                        protocol,
                        data_json,
                        batch,
                        c,
                        interval_ms,
                        Path(tmp),
                        [*admin_header_args(protocol, admin_key), *(extra or [])],
                        processes,
                        env,
                    )
                    if row and before:
                        row.executes = executes_summary(before, model_stats(stats_at, admin_key), sorted(before))
                    if row:
                        rows.append(row)
                        log.info(
                            "%s b=%d c=%d: %.0f img/s p50 %.2f ms [%s]",
                            protocol,
                            batch,
                            c,
                            row.images_per_s,
                            row.p50_ms,
                            row.composing,
                        )
    if not rows:  # nothing measured (a point refused): perf.csv keeps the header of the rows it has
        return rows
    csv_path = out / "perf.csv"
    new = not csv_path.exists()
    with open(csv_path, "a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(asdict(rows[0]).keys()))
        if new:
            w.writeheader()
        for r in rows:
            w.writerow(asdict(r))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    parser.add_argument("--images", type=Path, required=True, help="folder of images to send (round-robin)")
    parser.add_argument("--count", type=int, default=256, help="use at most this many images")
    parser.add_argument("-m", "--model", default="classify")
    parser.add_argument("--grpc-url", default="localhost:8001")
    parser.add_argument("--http-url", default="localhost:8000")
    parser.add_argument("--protocol", default="grpc", help="comma list of grpc,http")
    parser.add_argument("--batch", default="1", help="images per request, comma list (perf_analyzer -b)")
    parser.add_argument("--concurrency", default="1,2,4,8,16,32,64", help="comma list")
    parser.add_argument("--measurement-interval", type=int, default=4000, help="ms per measurement window")
    parser.add_argument("--out", type=Path, default=Path("perf-results"))
    parser.add_argument("--perf-analyzer", default="perf_analyzer", help="the program: a path or a command on PATH")
    parser.add_argument(
        "--admin-key-file",
        type=Path,
        help="file with the server's admin key (default: $TRITONPREP_ADMIN_KEY; none: open APIs)",
    )
    args, extra = parser.parse_known_args(argv)
    admin_key = args.admin_key_file.read_text().strip() if args.admin_key_file else os.environ.get(ADMIN_KEY_ENV)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    try:
        pa = find_perf_analyzer(args.perf_analyzer)
    except PerfAnalyzerUnavailable as e:
        log.error("%s", e)
        return 2
    rows = sweep(
        args.model,
        {"grpc": args.grpc_url, "http": args.http_url},
        load_images(args.images, args.count),
        args.protocol.split(","),
        [int(b) for b in args.batch.split(",")],
        [int(c) for c in args.concurrency.split(",")],
        args.measurement_interval,
        args.out,
        pa,
        extra,
        admin_key,
    )
    print_table(rows)
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())
