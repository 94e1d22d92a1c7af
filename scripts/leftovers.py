"""What tritonprep servers left on this machine after a test suite: processes, /dev/shm regions, GPU memory.

    python -m scripts.leftovers baseline --out /tmp/leftovers-baseline.json   # before the suite
    python -m scripts.leftovers check --baseline /tmp/leftovers-baseline.json # after it: exit 0 clean, 1 not

``check`` waits up to ``--wait`` seconds for things to go, then lists tritonprep server processes
(tritonserver or a stub with a tritonprep region prefix, watchdogs, and the CUDA MPS daemons and servers
whose pipe folder lies in a tritonprep work folder) and regions of this pid namespace,
and, with ``nvidia-smi``, the processes holding a CUDA context that the baseline did not have and GPU
memory above the baseline by more than ``--tolerance-mb`` (without a baseline, any CUDA process counts).
Without ``nvidia-smi`` the GPU part is skipped and says so. Regions with Triton's default names belong to
servers that are not tritonprep's: they are listed, not judged. Meant for a machine of its own (the GPU
machine), where the suite's servers are the only tritonprep servers.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from tritonprep_testkit.leftovers import (
    GpuSnapshot,
    foreign_regions,
    gpu_leftovers,
    gpu_snapshot,
    mps_of_host,
    of_host,
)


def check_gpu(baseline_path: Path | None, tolerance_mb: int) -> tuple[list[str], str]:
    """(problems, a one-line summary) of the GPUs against the baseline file's snapshot."""
    now = gpu_snapshot()
    if now is None:
        return [], "GPU: skipped (no nvidia-smi or no GPU)"
    baseline = None
    if baseline_path is not None:
        saved = json.loads(baseline_path.read_text()).get("gpu")
        baseline = None if saved is None else GpuSnapshot.from_json(saved)
    problems = gpu_leftovers(baseline, now, tolerance_mb)
    memory = ", ".join(f"GPU {i} {mb} MiB" for i, mb in sorted(now.memory_used_mb.items()))
    before = (
        ""
        if baseline is None
        else " (baseline: " + ", ".join(f"GPU {i} {mb} MiB" for i, mb in sorted(baseline.memory_used_mb.items())) + ")"
    )
    return problems, f"GPU: {memory}{before}; CUDA processes {sorted(now.compute_apps) or 'none'}"


def main(argv: list[str] | None = None) -> int:
    """Record a baseline, or check for leftovers (exit 1 if there are any)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    base = sub.add_parser("baseline", help="record GPU memory and CUDA processes now")
    base.add_argument("--out", type=Path, required=True)
    check = sub.add_parser("check", help="list what is left; exit 1 if anything is")
    check.add_argument("--baseline", type=Path, help="the file that `baseline` wrote")
    check.add_argument("--wait", type=float, default=20.0, help="seconds to wait for things to go (default: 20)")
    check.add_argument("--tolerance-mb", type=int, default=64, help="GPU memory allowed above the baseline (MiB)")
    args = parser.parse_args(argv)
    if args.command == "baseline":
        snapshot = gpu_snapshot()
        args.out.write_text(json.dumps({"gpu": None if snapshot is None else snapshot.to_json()}, indent=2))
        sys.stdout.write(f"baseline: {'no nvidia-smi' if snapshot is None else snapshot.to_json()} -> {args.out}\n")
        return 0
    deadline = time.monotonic() + args.wait
    while True:
        left = of_host()
        gpu_problems, gpu_line = check_gpu(args.baseline, args.tolerance_mb)
        if not (left or gpu_problems) or time.monotonic() >= deadline:
            break
        time.sleep(0.5)
    sys.stdout.write(f"tritonprep processes: {left.processes or 'none'}\n")
    daemons = [f"{p.pid} {p.name}" for p in mps_of_host()]
    sys.stdout.write(f"tritonprep MPS daemons and servers: {daemons or 'none'}\n")
    sys.stdout.write(f"tritonprep regions in /dev/shm: {left.regions or 'none'}\n")
    sys.stdout.write(f"regions with Triton's default names (not tritonprep's): {foreign_regions() or 'none'}\n")
    sys.stdout.write(gpu_line + "\n")
    for problem in gpu_problems:
        sys.stdout.write(f"GPU leftover: {problem}\n")
    clean = not (left or gpu_problems)
    sys.stdout.write("clean\n" if clean else "LEFTOVERS\n")
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main())
