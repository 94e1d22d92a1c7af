"""The Python example of docs/client.md runs as written against a real server."""

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


def test_the_python_example_runs(server, photos, tmp_path, monkeypatch):
    (tmp_path / "cat.jpg").write_bytes(encode(photos["chelsea"], "JPEG", quality=90))
    (tmp_path / "cat.png").write_bytes(encode(photos["chelsea"], "PNG"))
    (tmp_path / "coffee.jpg").write_bytes(encode(photos["coffee"], "JPEG", quality=90))
    monkeypatch.chdir(tmp_path)
    code = client_example().replace("localhost:8001", server.options.grpc_url)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "docs/client.md", "exec"), {})  # noqa: S102 - the page's own example
    lines = out.getvalue().splitlines()
    assert "espresso (1280,)" in out.getvalue() and len(lines) == 3 + 2 * 3, out.getvalue()
