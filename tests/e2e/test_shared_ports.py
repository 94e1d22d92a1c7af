"""Two tritonservers on one pair of ports, as a multi-GPU host runs one per GPU: the client spreads its
requests over both, and a `tritonprep classify` run survives one of them stopping or dying mid-run.

The kernel spreads connections, not requests, over the servers (``SO_REUSEPORT``); each server counts its
own requests on its own metrics port, so these tests see which server answered.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tritonprep_client import ClassifyClient
from tritonprep_client.client import OUTPUTS
from tritonprep_testkit.photos import write_photo_folder
from tritonprep_testkit.servers import CLI
from tritonprep_testkit.shared_ports import SharedPortServers

pytestmark = pytest.mark.e2e

IMAGES = 48
RETRY_LINE = re.compile(r"^tritonprep: retried (\d+) request\(s\): (.+)$")


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedPortServers]:
    with SharedPortServers(tmp_path_factory.mktemp("shared-ports")) as servers:
        yield servers


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory, photos: dict[str, np.ndarray]) -> Path:
    """48 JPEGs of the four photos (different qualities)."""
    return write_photo_folder(tmp_path_factory.mktemp("photos"), IMAGES, photos)


@pytest.fixture(scope="module")
def reference(pair: SharedPortServers, folder: Path) -> dict[str, list[tuple[int, float]]]:
    """Each file's top-5 ``(class, score)`` from an undisturbed run, one request at a time."""
    files = sorted(folder.iterdir())
    with ClassifyClient(pair.grpc_url, "grpc", concurrency=1) as client:
        answers = dict(client.classify_each([f.read_bytes() for f in files]))
    return {files[i].name: [(p.index, p.score) for p in preds] for i, preds in answers.items()}  # type: ignore[union-attr]


def url(pair: SharedPortServers, protocol: str) -> str:
    return pair.grpc_url if protocol == "grpc" else pair.http_url


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_a_client_with_concurrency_reaches_both_servers(pair, folder, protocol):
    """16 requests in flight: 16 connections, which the kernel spreads over both servers (all on one: 2 in
    65,536); one connection (one request in flight) reaches one server only."""
    images = [f.read_bytes() for f in sorted(folder.iterdir())]
    spread = {}
    for concurrency in (16, 1):
        before = pair.settled()
        with ClassifyClient(url(pair, protocol), protocol, concurrency=concurrency) as client:
            assert client.connections == concurrency
            failed = [r for _, r in client.infer_each(images, OUTPUTS, batch_size=1) if isinstance(r, Exception)]
        assert failed == []
        spread[concurrency] = pair.served_since(before, IMAGES)
        assert sum(spread[concurrency].values()) == IMAGES, spread
    assert all(n > 0 for n in spread[16].values()), f"requests per server: {spread[16]}"
    assert sorted(spread[1].values()) == [0, IMAGES], f"requests per server: {spread[1]}"


def run_and_disturb(
    pair: SharedPortServers, folder: Path, protocol: str, how: str
) -> tuple[subprocess.CompletedProcess, int]:
    """Classify the folder with the CLI and stop (or kill) the server that is answering most of it once the run
    is under way (a kill freezes it for a second first, so requests are in flight on its connections when it
    dies); the run's outcome and which server was stopped."""
    before = pair.settled()  # what earlier requests left uncounted would pass for this run's
    argv = [str(CLI), "classify", str(folder), "--url", url(pair, protocol), "--json", "--batch-size", "1"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            now = pair.served()
            done = {k: now[sid] - before[sid] for k, sid in enumerate(pair.ids)}
            if sum(done.values()) >= 4:
                break
            time.sleep(0.02)
        victim = max(done, key=done.__getitem__)  # it holds some of the run's connections
        assert proc.poll() is None, "the run ended before a server could be stopped"
        assert 1 <= sum(done.values()) < IMAGES // 2, f"requests answered before the stop: {done}"
        if how == "kill":
            pair.kill(victim, frozen_s=1.0)
        else:
            pair.stop(victim)
        out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return subprocess.CompletedProcess(argv, proc.returncode, out, err), victim


@pytest.mark.parametrize(("protocol", "how"), [("grpc", "stop"), ("grpc", "kill"), ("http", "kill")])
def test_a_run_answers_every_file_while_one_server_goes(pair, folder, reference, protocol, how):
    """The stopped server's connections fail (reset, or "Server is stopping" and then unknown models while it
    unloads); those requests go again on fresh connections, which reach the other server: every file gets
    the answer an undisturbed run gave, nothing is reported failed, the exit code is 0, and one line says
    how many requests were retried."""
    try:
        r, victim = run_and_disturb(pair, folder, protocol, how)
    finally:
        pair.start()  # the next test has both servers again
    assert r.returncode == 0, r.stderr
    lines = [json.loads(line) for line in r.stdout.splitlines()]
    assert [Path(x["file"]).name for x in lines] == sorted(reference)
    for x in lines:
        want = reference[Path(x["file"]).name]
        assert "error" not in x, x
        assert [p["index"] for p in x["predictions"]] == [i for i, _ in want], x["file"]
        np.testing.assert_allclose([p["score"] for p in x["predictions"]], [s for _, s in want], atol=1e-5)
    err = r.stderr.strip().splitlines()
    assert len(err) == 1, r.stderr
    match = RETRY_LINE.match(err[0])
    assert match is not None and int(match.group(1)) >= 1, r.stderr
    assert re.search(r"\b\d+ server gone\b", match.group(2)), r.stderr
