"""The log of a tritonserver on a machine without a GPU, without Triton's failed CUDA probes.

Triton 2.51 is built with GPU support and probes CUDA whatever its flags say: the CUDA block manager
at start-up (``core/src/server.cc``: "CudaDriverHelper has not been initialized.") and one CUDA stream
per ensemble (``core/src/ensemble_scheduler/ensemble_scheduler.cc``: "unable to create stream for
<ensemble>: CUDA driver version is insufficient ..."), each logged at error level although the server
works as it should without a GPU. The flags of :mod:`.command` remove the other such lines (pinned
memory, DCGM); no flag removes these.

Where the launcher sees no GPU, or the server is one of several of a host (each labelled, ``gpu1``), the
watchdog runs tritonserver's output through this filter::

    python -m tritonprep.launcher.logfilter <region prefix> [--label gpu1] [--keep-cuda-probes]

With a label, every line of the server's starts with ``[gpu1] ``, so the servers of a host can share a log. A
server that sees a GPU is filtered with ``--keep-cuda-probes``: there those lines name a real CUDA problem.

It copies every line from stdin to stdout, except those exact messages, and says once, at the first
one, that it leaves them out (its own line, information level). Lines that could matter always pass:
any other text, and these messages with another CUDA error than "no driver" or "no device". It reads
until end of file, which comes when tritonserver and every process that inherited its output are gone,
and ignores SIGINT and SIGTERM so that tritonserver never writes into a closed pipe; the region prefix
on its command line lets the leftovers checks count it as part of the server.
"""

from __future__ import annotations

import re
import signal
import sys
import time
from typing import BinaryIO

#: Triton's CUDA probes that fail on a machine without a GPU (driver absent, or present without a device)
_NO_GPU = rb"(?:CUDA driver version is insufficient for CUDA runtime version|no CUDA-capable device is detected)"
PROBES = (
    re.compile(rb'^E\d{4} [\d:.]+ +\d+ server\.cc:\d+\] "CudaDriverHelper has not been initialized\."\s*$'),
    re.compile(rb'^E\d{4} [\d:.]+ +\d+ ensemble_scheduler\.cc:\d+\] "unable to create stream for [^:"]+: ' + _NO_GPU),
)


def is_probe(line: bytes) -> bool:
    """True for a line of Triton's failed CUDA probes on a machine without a GPU."""
    return any(p.match(line) for p in PROBES)


def run(source: BinaryIO, sink: BinaryIO, label: str = "", probes: bool = True) -> int:
    """Copy ``source`` to ``sink`` line by line, without the probes' lines where ``probes`` (no GPU: they are
    expected) and each line after ``[label] `` where a label is given; return how many were left out."""
    left_out = 0
    head = f"[{label}] ".encode() if label else b""
    for line in iter(source.readline, b""):
        if probes and is_probe(line):
            if not left_out:
                stamp = time.strftime("%H:%M:%S")
                sink.write(
                    head
                    + f"{stamp} tritonprep logfilter: no GPU here: leaving out Triton's failed CUDA probes "
                    "(CudaDriverHelper, ensemble CUDA streams), which do not affect a CPU server\n".encode()
                )
            left_out += 1
            continue
        sink.write(head + line)
        sink.flush()
    return left_out


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m tritonprep.launcher.logfilter <region prefix> [--label L] [--keep-cuda-probes]``
    (a server that sees a GPU keeps every line: there the probes' lines name a real CUDA problem)."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    args = sys.argv[1:] if argv is None else argv
    label = args[args.index("--label") + 1] if "--label" in args[:-1] else ""
    try:
        run(sys.stdin.buffer, sys.stdout.buffer, label, probes="--keep-cuda-probes" not in args)
    except BrokenPipeError:  # whoever reads our output is gone: keep reading, so that tritonserver never blocks
        for _ in iter(sys.stdin.buffer.readline, b""):
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
