"""The Python examples of docs/client.md run as written against a real server: tritonprep's client (a bad image
included) and plain tritonclient over gRPC and HTTP, raw JPEG bytes to `classify`."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

from tritonprep_testkit.photos import encode

pytestmark = pytest.mark.e2e

CLIENT_DOC = Path(__file__).resolve().parents[2] / "docs" / "client.md"


def client_example() -> str:
    section = CLIENT_DOC.read_text().split("\n## Python\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 1, "the section has one Python example"
    return blocks[0]


def run_example(server, tmp_path, monkeypatch, coffee: bytes) -> list[str]:
    """The page's example on cat.jpg, cat.png and ``coffee`` as coffee.jpg; the lines it prints."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "coffee.jpg").write_bytes(coffee)
    code = client_example().replace("localhost:8001", server.options.grpc_url)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "docs/client.md", "exec"), {})  # noqa: S102 - the page's own example
    return out.getvalue().splitlines()


@pytest.fixture
def cats(photos, tmp_path):
    (tmp_path / "cat.jpg").write_bytes(encode(photos["chelsea"], "JPEG", quality=90))
    (tmp_path / "cat.png").write_bytes(encode(photos["chelsea"], "PNG"))


def test_the_python_example_runs(server, photos, cats, tmp_path, monkeypatch):
    lines = run_example(server, tmp_path, monkeypatch, encode(photos["coffee"], "JPEG", quality=90))
    text = "\n".join(lines)
    assert "coffee.jpg espresso (1280,)" in text and len(lines) == 3 * 2 + 3, text  # 2 lines per image, 3x3 matrix


def test_the_python_example_survives_a_bad_image(server, photos, cats, tmp_path, monkeypatch):
    truncated = encode(photos["coffee"], "JPEG", quality=90)[:2000]
    lines = run_example(server, tmp_path, monkeypatch, truncated)
    text = "\n".join(lines)
    assert any(line.startswith("coffee.jpg failed: ") for line in lines), text
    assert sum(line.startswith(("cat.jpg ", "cat.png ")) and "(1280,)" in line for line in lines) == 2, text
    assert len(lines) == 2 * 2 + 1 + 2, text  # 2 lines per good image, the failure, a 2x2 matrix


def tritonclient_examples() -> dict[str, str]:
    """The plain-tritonclient section's examples, by protocol."""
    section = CLIENT_DOC.read_text().split("\n## Plain tritonclient\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 2, "the section has a gRPC and an HTTP example"
    return {"grpc": blocks[0], "http": blocks[1]}


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_the_plain_tritonclient_examples_run(server, jpegs, tmp_path, monkeypatch, protocol):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cat.jpg").write_bytes(jpegs["chelsea"])
    (tmp_path / "coffee.jpg").write_bytes(jpegs["coffee"])
    code = tritonclient_examples()[protocol]
    assert f"tritonclient.{protocol}" in code and '"classify"' in code
    url = server.options.grpc_url if protocol == "grpc" else f"{server.options.host}:{server.options.http_port}"
    code = code.replace("localhost:8001" if protocol == "grpc" else "localhost:8000", url)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, f"docs/client.md ({protocol})", "exec"), {})  # noqa: S102 - the page's own example
    cat, coffee = out.getvalue().splitlines()
    assert cat.startswith("cat.jpg 285 Egyptian cat 0.") and coffee.startswith("coffee.jpg 967 espresso 0."), out
