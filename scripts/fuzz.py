"""Coverage-guided fuzzing (atheris / libFuzzer) of the decode + validation path.

    python -m scripts.fuzz --runs 20000            # about a minute on 2 cores
    python -m scripts.fuzz --seconds 3600          # the longer run (an hour)

The target is :func:`tritonprep.decode.pillow.decode_rgb` (sniffing, limits, header parsers,
JPEG marker walk, Pillow decode, EXIF orientation, colour conversion) with the default
limits. Every input must either decode to an ``(h, w, 3)`` uint8 array or raise an
:class:`~tritonprep.errors.ImageError`; anything else is a crash (its input and traceback
are saved under ``--artifacts``), and so is an input that takes longer than ``--timeout``
seconds (libFuzzer's hang detection). Tritonprep's and Pillow's Python code are
instrumented; the seeds are the small items of the hostile-input corpus (tritonprep_testkit.corpus).

The script runs the fuzzer in a child process and then prints: inputs tried, crashes,
hangs, and the p50/p99 time to reject an input against the p50/p99 time to decode one
(during fuzzing, and for the corpus's valid images). ``--json FILE`` writes the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np

MAX_SEED = 65536


def write_seeds(folder: Path) -> int:
    """The corpus items of at most MAX_SEED bytes, as files; returns how many."""
    from tritonprep_testkit.corpus import build

    n = 0
    for item in build():
        if 0 < len(item.data) <= MAX_SEED:
            (folder / item.name.replace("/", "__")).write_bytes(item.data)
            n += 1
    return n


# ---------------------------------------------------------------------- the fuzzing child
class Stats:
    """Per-input timings and outcomes, flushed to a JSON file now and then (libFuzzer ends with exit())."""

    def __init__(self, path: Path, artifacts: Path) -> None:
        self.path, self.artifacts = path, artifacts
        self.times: dict[str, list[float]] = {"decoded": [], "rejected": []}
        self.crashes = 0
        self.slowest: list[tuple[float, str]] = []  # the slowest rejections and their messages
        self.last_flush = time.monotonic()

    def add(self, outcome: str, seconds: float, message: str = "") -> None:
        self.times[outcome].append(seconds)
        if message and (len(self.slowest) < 5 or seconds > self.slowest[-1][0]):
            self.slowest = sorted([*self.slowest, (seconds, message[:100])], reverse=True)[:5]
        n = len(self.times["decoded"]) + len(self.times["rejected"])
        if n % 100 == 0 or time.monotonic() - self.last_flush > 1.0:
            self.flush()

    def crash(self, data: bytes, text: str) -> None:
        self.crashes += 1
        stem = self.artifacts / f"crash-{self.crashes:04d}"
        stem.with_suffix(".bin").write_bytes(data)
        stem.with_suffix(".txt").write_text(text)
        self.flush()

    def flush(self) -> None:
        self.last_flush = time.monotonic()
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"times": self.times, "crashes": self.crashes, "slowest": self.slowest}))
        os.replace(tmp, self.path)


def fuzz_child(argv: list[str], stats_path: Path, artifacts: Path) -> None:
    """Run libFuzzer in this process (never returns)."""
    import atheris

    with atheris.instrument_imports(include=["tritonprep", "PIL"]):
        from tritonprep.decode.pillow import decode_rgb
        from tritonprep.errors import ImageError
        from tritonprep.spec import Limits

    limits = Limits()
    stats = Stats(stats_path, artifacts)

    def one_input(data: bytes) -> None:
        start = time.perf_counter()
        try:
            arr = decode_rgb(data, limits)
        except ImageError as e:
            stats.add("rejected", time.perf_counter() - start, f"{type(e).__name__}: {e}")
            return
        except Exception:  # noqa: BLE001 - the fuzzer's job: record any other exception as a crash
            stats.crash(data, traceback.format_exc())
            return
        if arr.ndim != 3 or arr.shape[2] != 3 or arr.dtype != np.uint8 or 0 in arr.shape:
            stats.crash(data, f"bad output array {arr.shape} {arr.dtype}")
            return
        stats.add("decoded", time.perf_counter() - start)

    atheris.Setup(argv, one_input)
    atheris.Fuzz()


# ---------------------------------------------------------------------- the driver
def valid_times(repeat: int = 10) -> list[float]:
    """Decode times of valid photos (scikit-image's samples, full size, as JPEG, PNG and WebP):
    the reference for 'time to decode a valid image'."""
    from skimage import data

    from tritonprep.decode.pillow import decode_rgb
    from tritonprep.spec import Limits
    from tritonprep_testkit.corpus import encode

    photos = [data.chelsea(), data.coffee(), data.astronaut(), data.rocket()]
    files = (
        [encode(p, "JPEG", quality=90) for p in photos]
        + [encode(p, "PNG") for p in photos]
        + [encode(p, "WEBP", quality=90) for p in photos]
    )
    times = []
    for _ in range(repeat):
        for f in files:
            start = time.perf_counter()
            decode_rgb(f, Limits())
            times.append(time.perf_counter() - start)
    return times


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Fuzz in a child process and collect the figures."""
    with tempfile.TemporaryDirectory(prefix="tritonprep-fuzz-") as tmp:
        work = Path(tmp)
        seeds, live = work / "seeds", work / "live"
        seeds.mkdir()
        live.mkdir()
        n_seeds = write_seeds(seeds)
        artifacts = args.artifacts.resolve()
        artifacts.mkdir(parents=True, exist_ok=True)
        stats_path = work / "stats.json"
        lib_args = [
            f"-max_len={MAX_SEED}",
            f"-timeout={args.timeout}",
            f"-rss_limit_mb={args.rss_limit_mb}",
            f"-seed={args.seed}",
            f"-artifact_prefix={artifacts}/",
            "-print_final_stats=1",
        ]
        if args.runs:
            lib_args.append(f"-runs={args.runs}")
        if args.seconds:
            lib_args.append(f"-max_total_time={int(args.seconds)}")
        cmd = [
            sys.executable,
            "-m",
            "scripts.fuzz",
            "--child",
            str(stats_path),
            str(artifacts),
            "--",
            *lib_args,
            str(live),
            str(seeds),
        ]
        start = time.monotonic()
        proc = subprocess.run(
            cmd, capture_output=True, text=True, check=False, timeout=(args.seconds or 3600 * 24) + 600
        )
        elapsed = time.monotonic() - start
        (artifacts / "libfuzzer.log").write_text(proc.stderr)
        stats = json.loads(stats_path.read_text()) if stats_path.exists() else {"times": {}, "crashes": 0}
    rejected = stats["times"].get("rejected", [])
    decoded = stats["times"].get("decoded", [])
    reference = valid_times()
    ms = 1000.0

    def pct(values: list[float], q: float) -> float:
        return round(float(np.percentile(values, q)) * ms, 3) if values else float("nan")

    hangs = proc.stderr.count("ALARM: working on the last Unit") + proc.stderr.count("-timeout")
    executed = next(
        (line.split()[-1] for line in proc.stderr.splitlines() if "stat::number_of_executed_units" in line), None
    )
    return {
        "seeds": n_seeds,
        "inputs_tried": int(executed) if executed else len(rejected) + len(decoded) + stats["crashes"],
        "decoded": len(decoded),
        "rejected": len(rejected),
        "crashes": stats["crashes"],
        "hangs_or_fuzzer_errors": hangs if proc.returncode == 0 else max(hangs, 1),
        "fuzzer_exit_code": proc.returncode,
        "seconds": round(elapsed, 1),
        "reject_ms_p50": pct(rejected, 50),
        "reject_ms_p99": pct(rejected, 99),
        "decode_ms_p50_fuzzed": pct(decoded, 50),
        "decode_ms_p99_fuzzed": pct(decoded, 99),
        "decode_ms_p50_valid_photos": pct(reference, 50),
        "decode_ms_p99_valid_photos": pct(reference, 99),
        "slowest_rejections_ms": [(round(t * ms, 1), m) for t, m in stats.get("slowest", [])],
        "artifacts": str(args.artifacts),
    }


def main(argv: list[str] | None = None) -> int:
    """Fuzz and print the figures; exit 1 if anything crashed or hung."""
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--child":
        fuzz_child([sys.argv[0], *argv[4:]], Path(argv[1]), Path(argv[2]))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=0, help="inputs to try (0: until --seconds)")
    parser.add_argument("--seconds", type=float, default=0, help="time budget (0: until --runs)")
    parser.add_argument("--timeout", type=int, default=10, help="seconds after which one input is a hang")
    parser.add_argument("--rss-limit-mb", type=int, default=4096)
    parser.add_argument("--seed", type=int, default=1, help="libFuzzer's random seed (0: from the clock)")
    parser.add_argument("--artifacts", type=Path, default=Path(".cache/fuzz"), help="crash inputs and the log")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    if not args.runs and not args.seconds:
        args.runs = 20000
    figures = run(args)
    from tritonprep_testkit.loadgen import report  # not at the top: the fuzzing child instruments tritonprep's imports

    report(figures, args.json)
    return 1 if figures["crashes"] or figures["hangs_or_fuzzer_errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
