"""A server that refuses for overload: `tritonprep classify` sends the refused requests again, after a
backoff, until every file has its answer.

The server serves a copy of the repository whose ``preprocess`` queue holds one request and times out
after 100 ms, so that a dozen requests in flight really are refused ("Exceeds maximum queue size",
"Request timeout expired"); without retries the same run fails files.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tritonprep_testkit.photos import write_photo_folder
from tritonprep_testkit.servers import CLI, MODEL_REPOSITORY, running_server

pytestmark = pytest.mark.e2e

IMAGES = 40
#: the models `classify` needs
MODELS = ("classify", "preprocess", "classifier", "postprocess")


def busy_repository(root: Path) -> Path:
    """The models of `classify`, with a preprocess queue of one request and a 100 ms queue timeout."""
    repo = root / "repository"
    for model in MODELS:
        shutil.copytree(MODEL_REPOSITORY / model, repo / model)
    for config in (repo / "preprocess").rglob("*.pbtxt"):
        text = config.read_text()
        text, queues = re.subn(r"max_queue_size: \d+", "max_queue_size: 1", text)
        text, timeouts = re.subn(r"default_timeout_microseconds: \d+", "default_timeout_microseconds: 100000", text)
        assert queues == timeouts == 1, f"{config}: no queue policy to shrink"
        config.write_text(text)
    return repo


@pytest.fixture(scope="module")
def busy_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    root = tmp_path_factory.mktemp("busy")
    with running_server(root / "tritonserver.log", repository=busy_repository(root)) as (server, _):
        yield server


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory, photos: dict[str, np.ndarray]) -> Path:
    return write_photo_folder(tmp_path_factory.mktemp("photos"), IMAGES, photos)


@pytest.fixture(scope="module")
def reference(busy_server: object, folder: Path) -> dict[str, list[int]]:
    """Each file's top-5 classes, one request at a time (nothing to refuse)."""
    from tritonprep_client import ClassifyClient

    files = sorted(folder.iterdir())
    with ClassifyClient(busy_server.options.grpc_url, "grpc", concurrency=1) as client:  # type: ignore[attr-defined]
        answers = dict(client.classify_each([f.read_bytes() for f in files]))
    assert client.retries.total == 0
    return {files[i].name: [p.index for p in preds] for i, preds in answers.items()}  # type: ignore[union-attr]


def classify(server: object, folder: Path, *extra: str) -> subprocess.CompletedProcess:
    url = server.options.grpc_url  # type: ignore[attr-defined]
    argv = [str(CLI), "classify", str(folder), "--url", url, "--json", "--batch-size", "1", "--concurrency", "12"]
    return subprocess.run([*argv, *extra], capture_output=True, text=True, timeout=240, check=False)


def test_without_retries_the_server_really_refuses(busy_server, folder):
    r = classify(busy_server, folder, "--retries", "0")
    assert r.returncode == 1
    errors = [x["error"] for x in map(json.loads, r.stdout.splitlines()) if "error" in x]
    assert errors and all("Exceeds maximum queue size" in e or "Request timeout expired" in e for e in errors), errors
    assert "retried" not in r.stderr


def test_overload_refusals_are_retried_until_every_file_is_answered(busy_server, folder, reference):
    r = classify(busy_server, folder)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = [json.loads(line) for line in r.stdout.splitlines()]
    assert [Path(x["file"]).name for x in lines] == sorted(reference) and len(lines) == IMAGES
    for x in lines:
        assert "error" not in x, x
        assert [p["index"] for p in x["predictions"]] == reference[Path(x["file"]).name], x
    err = r.stderr.strip().splitlines()
    assert len(err) == 1, r.stderr
    match = re.fullmatch(r"tritonprep: retried (\d+) request\(s\): (\d+) overloaded", err[0])
    assert match is not None and match.group(1) == match.group(2) and int(match.group(1)) > 0, r.stderr
