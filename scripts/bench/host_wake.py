"""How long a sleeping process takes to answer, with and without the host's CPUs held awake.

A c=1 request wakes several sleeping processes in turn (the server's threads, each Python-backend stub). This probe
measures that cost on the host alone, without a GPU: a parent process sleeps ``gap`` ms, writes one byte to a child
blocked on a pipe, the child answers with one byte and the parent times the round trip; after another sleep it
times a small fixed piece of Python work (a cold core runs it slower). Each setting (``--settings``):

* ``as_is``: the host as it is;
* ``dma_latency_0``: ``/dev/cpu_dma_latency`` held open at 0 us (the kernel's PM QoS request: no CPU enters an
  idle state deeper than polling while the file is open; root only); tuned's latency-performance profile
  makes the same request with a small value;
* ``spin_idle``: one process per CPU spinning at ``SCHED_IDLE`` (it runs only where nothing else wants the CPU, and
  any woken task preempts it): no CPU ever reaches the idle loop, so a virtual machine's vCPUs never halt, as with
  the kernel's ``idle=poll``, at the price of every idle CPU cycle.

It also prints the host's idle driver, governor and idle states. One JSON row per (setting, gap) on ``--out``.

    python -m scripts.bench.host_wake --out FILE [--gaps-ms 0,1,3,10] [--trials 300]
    python -m scripts.bench.host_wake --hold-spin      # the spinners alone, until SIGTERM (a server's A/B)
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing
import os
import signal
import statistics
import struct
import sys
import time
from pathlib import Path
from typing import Any

log = logging.getLogger("host_wake")

#: the kernel's PM QoS CPU latency file (Documentation/power/pm_qos_interface.rst)
CPU_DMA_LATENCY = Path("/dev/cpu_dma_latency")
_CPUIDLE = Path("/sys/devices/system/cpu/cpu0/cpuidle")

SETTINGS = ("as_is", "dma_latency_0", "spin_idle")


class CpuLatencyHold:
    """Holds ``/dev/cpu_dma_latency`` open at ``latency_us`` until :meth:`release` (or the process's end)."""

    def __init__(self, latency_us: int, path: Path = CPU_DMA_LATENCY) -> None:
        self.latency_us = latency_us
        self.path = path
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        """Whether the request is in force."""
        return self._fd is not None

    def acquire(self) -> bool:
        """Open the file and write the value; False where this process may not (no file, not root)."""
        if self._fd is not None:
            return True
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CLOEXEC)
        except OSError as exc:
            log.debug("cannot open %s: %s", self.path, exc)
            return False
        try:
            os.write(fd, struct.pack("=i", self.latency_us))
        except OSError as exc:
            os.close(fd)
            log.debug("cannot write %s: %s", self.path, exc)
            return False
        self._fd = fd
        return True

    def release(self) -> None:
        """Close the file: the request ends."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


def _spin(cpu: int) -> None:
    os.sched_setaffinity(0, {cpu})
    os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    while True:
        pass


class IdleSpinners:
    """One ``SCHED_IDLE`` spinning process per CPU this process may use, until :meth:`stop`."""

    def __init__(self) -> None:
        self._procs: list[multiprocessing.process.BaseProcess] = []

    def start(self) -> int:
        """Start the spinners; returns how many."""
        context = multiprocessing.get_context("fork")
        for cpu in sorted(os.sched_getaffinity(0)):
            proc = context.Process(target=_spin, args=(cpu,), daemon=True, name=f"spin-idle-{cpu}")
            proc.start()
            self._procs.append(proc)
        return len(self._procs)

    def stop(self) -> None:
        """Stop every spinner and reap it."""
        procs, self._procs = self._procs, []
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.join(5)


def idle_states(cpuidle: Path = _CPUIDLE) -> dict[str, Any]:
    """CPU 0's idle driver, frequency governor and idle states (name, exit latency in us, disabled): what a
    host's c=1 latency depends on; empty values where sysfs does not say."""
    root = cpuidle.parent.parent

    def read(path: Path) -> str:
        try:
            return path.read_text().strip()
        except OSError:
            return ""

    states = []
    for state in sorted(cpuidle.glob("state*"), key=lambda p: int(p.name[5:] or 0)):
        states.append(
            {"name": read(state / "name"), "latency_us": read(state / "latency"), "disabled": read(state / "disable")}
        )
    return {
        "driver": read(root / "cpuidle" / "current_driver"),
        "governor": read(cpuidle.parent / "cpufreq" / "scaling_governor"),
        "states": states,
    }


def _echo(reader: int, writer: int) -> None:
    while os.read(reader, 1):
        os.write(writer, b"x")


def _work() -> float:
    start = time.perf_counter()
    total = 0
    for i in range(20_000):
        total += i * i
    return time.perf_counter() - start


def _measure(gap_s: float, trials: int) -> dict[str, float]:
    to_child, child_in = os.pipe()
    child_out, from_child = os.pipe()
    child = multiprocessing.get_context("fork").Process(target=_echo, args=(to_child, from_child), daemon=True)
    child.start()
    round_trips: list[float] = []
    work: list[float] = []
    try:
        for _ in range(trials + 20):
            if gap_s:
                time.sleep(gap_s)
            start = time.perf_counter()
            os.write(child_in, b"x")
            os.read(child_out, 1)
            round_trips.append(time.perf_counter() - start)
            if gap_s:
                time.sleep(gap_s)
            work.append(_work())
    finally:
        os.close(child_in)
        child.join(5)
        for fd in (to_child, child_out, from_child):
            os.close(fd)
    round_trips, work = round_trips[20:], work[20:]
    return {
        "round_trip_p50_us": statistics.median(round_trips) * 1e6,
        "round_trip_p90_us": statistics.quantiles(round_trips, n=10)[-1] * 1e6,
        "work_p50_us": statistics.median(work) * 1e6,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--gaps-ms", default="0,1,3,10")
    parser.add_argument("--trials", type=int, default=300)
    parser.add_argument("--settings", default=",".join(SETTINGS))
    parser.add_argument("--hold-spin", action="store_true", help="run the spinners until SIGTERM, measure nothing")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.hold_spin:
        return _hold_spin()
    if args.out is None:
        parser.error("--out is required (or --hold-spin)")
    log.info("idle states: %s", json.dumps(idle_states()))
    gaps = [float(g) for g in args.gaps_ms.split(",")]
    rows: list[dict[str, Any]] = []
    for setting in args.settings.split(","):
        if setting not in SETTINGS:
            parser.error(f"unknown setting {setting!r}; one of {', '.join(SETTINGS)}")
        hold = CpuLatencyHold(0) if setting == "dma_latency_0" else None
        if hold is not None and not hold.acquire():
            log.info("%s: %s is not writable here; skipped", setting, CPU_DMA_LATENCY)
            continue
        spinners = IdleSpinners() if setting == "spin_idle" else None
        if spinners is not None:
            spinners.start()
        try:
            for gap in gaps:
                row = {"setting": setting, "gap_ms": gap, **_measure(gap / 1000, args.trials)}
                log.info("%s", json.dumps(row))
                rows.append(row)
        finally:
            if hold is not None:
                hold.release()
            if spinners is not None:
                spinners.stop()
    args.out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return 0


def _hold_spin() -> int:
    spinners = IdleSpinners()
    log.info("spinning on %d CPUs at SCHED_IDLE until SIGTERM", spinners.start())
    signal.signal(signal.SIGTERM, lambda *_: None)
    try:
        signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        spinners.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
