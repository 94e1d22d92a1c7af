"""A stand-in for ``nvidia-cuda-mps-control`` (and its ``nvidia-cuda-mps-server``) for tests without a GPU.

:func:`install` writes it into a folder that a test puts first on PATH. Like the real one:

* ``nvidia-cuda-mps-control -f`` (or ``-d``, which forks into the background) runs the control daemon,
  listening on ``$CUDA_MPS_PIPE_DIRECTORY/control``;
* ``nvidia-cuda-mps-control`` without arguments sends the commands on stdin to that daemon and prints its
  answers (exit 1 if no daemon answers);
* the daemon answers ``get_server_list``, ``start_server -uid N`` (starts an ``nvidia-cuda-mps-server``
  process), ``get_client_list <server>`` (the processes whose environment names this pipe folder),
  ``terminate_client <server> <client>``, ``shutdown_server <pid> [-f]`` and ``quit`` (ends its servers and
  itself).

Every command the daemon receives is appended to ``$FAKE_MPS_RECORD`` as ``<daemon pid> <command>``. For the
ways MPS fails: ``FAKE_MPS_FAIL=daemon`` (the daemon exits at once), ``FAKE_MPS_FAIL=server`` (no server
ever starts), ``FAKE_MPS_IGNORE_QUIT=1`` (the daemon ignores ``quit``, so it must be killed),
``FAKE_MPS_HANG_TERMINATE=1`` (``terminate_client`` is never answered, as by a server poisoned by a fault).
"""

from __future__ import annotations

import sys
from pathlib import Path

SCRIPT = r"""
import os, signal, socket, subprocess, sys, threading, time

PIPE = os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps")
SOCK = os.path.join(PIPE, "control")
HERE = os.path.dirname(os.path.abspath(sys.argv[0]))


def record(text):
    path = os.environ.get("FAKE_MPS_RECORD")
    if path:
        with open(path, "a") as f:
            f.write(f"{os.getpid()} {text}\n")


def clients():
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            env = open(f"/proc/{entry}/environ", "rb").read().split(b"\0")
            name = os.path.basename(open(f"/proc/{entry}/cmdline", "rb").read().split(b"\0")[0].decode())
            state = open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        ours = f"CUDA_MPS_PIPE_DIRECTORY={PIPE}".encode() in env
        if state != "Z" and ours and not name.startswith("nvidia-cuda-mps"):
            found.append(int(entry))
    return found


def daemon():
    if os.environ.get("FAKE_MPS_FAIL") == "daemon":
        print("fake MPS: cannot start the control daemon (as asked)", flush=True)
        sys.exit(1)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    servers = []
    srv = socket.socket(socket.AF_UNIX)
    srv.bind(SOCK)
    srv.listen(8)
    record("daemon started " + os.environ.get("CUDA_VISIBLE_DEVICES", "-"))
    while True:
        conn, _ = srv.accept()
        data = b""
        while True:
            chunk = conn.recv(4096)
            if not chunk:
                break
            data += chunk
        answer, quitting, hung = [], False, False
        for line in data.decode().splitlines():
            words = line.split()
            if not words:
                continue
            record(line)
            servers = [s for s in servers if s.poll() is None]
            if words[0] == "terminate_client" and os.environ.get("FAKE_MPS_HANG_TERMINATE") == "1":
                hung = True  # a poisoned MPS server: this command is never answered
                threading.Thread(target=lambda c=conn: (time.sleep(60), c.close()), daemon=True).start()
                break
            if words[0] == "get_server_list":
                answer += [str(s.pid) for s in servers]
            elif words[0] == "start_server":
                if os.environ.get("FAKE_MPS_FAIL") != "server" and not servers:
                    servers.append(subprocess.Popen(
                        [os.path.join(HERE, "nvidia-cuda-mps-server"), "-c", "while :; do sleep 0.1; done"]))
            elif words[0] == "get_client_list":
                answer += [str(c) for c in clients()]
            elif words[0] == "shutdown_server":
                for s in servers:
                    if str(s.pid) == words[1]:
                        s.kill()
                        s.wait()
            elif words[0] == "quit" and os.environ.get("FAKE_MPS_IGNORE_QUIT") != "1":
                quitting = True
        if hung:
            continue
        conn.sendall(("\n".join(answer) + ("\n" if answer else "")).encode())
        conn.close()
        if quitting:
            for s in servers:
                s.kill()
                s.wait()
            srv.close()
            os.unlink(SOCK)
            sys.exit(0)


def client():
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(SOCK)
    except OSError:
        print("Cannot find MPS control daemon process")
        sys.exit(1)
    s.sendall(sys.stdin.read().encode())
    s.shutdown(socket.SHUT_WR)
    out = b""
    while True:
        chunk = s.recv(4096)
        if not chunk:
            break
        out += chunk
    sys.stdout.write(out.decode())
    sys.exit(0)


if sys.argv[1:] == ["-f"]:
    daemon()
elif sys.argv[1:] == ["-d"]:
    if os.fork() == 0:
        os.setsid()
        daemon()
    sys.exit(0)
else:
    client()
"""


def install(folder: Path) -> Path:
    """Write ``nvidia-cuda-mps-control`` and ``nvidia-cuda-mps-server`` into ``folder``; return ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "fake_mps_control.py").write_text(SCRIPT)
    control = folder / "nvidia-cuda-mps-control"  # argv[0] is its name, as for the real program
    control.write_text(f'#!/bin/bash\nexec -a "$0" {sys.executable} "$(dirname "$0")/fake_mps_control.py" "$@"\n')
    control.chmod(0o755)
    server = folder / "nvidia-cuda-mps-server"
    if not server.exists():
        server.symlink_to("/bin/sh")
    return folder


def recorded(path: Path) -> list[str]:
    """The commands the fake daemon(s) received, without the daemon pids."""
    if not path.exists():
        return []
    return [line.split(" ", 1)[1] for line in path.read_text().splitlines()]


def environ_of(pid: int) -> dict[str, str]:
    """The environment of ``pid``."""
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(e.decode().partition("=")[::2] for e in raw.split(b"\0") if e)
