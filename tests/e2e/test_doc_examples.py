"""The README's Python example of "Several models from one decode" runs as written against a real server."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

from tritonprep_testkit.photos import encode

pytestmark = pytest.mark.e2e

README = Path(__file__).resolve().parents[2] / "README.md"


def readme_example() -> str:
    section = README.read_text().split("## Several models from one decode", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 1, "the section has one Python example"
    return blocks[0]


def test_the_python_example_runs(server, photos, tmp_path, monkeypatch):
    (tmp_path / "cat.jpg").write_bytes(encode(photos["chelsea"], "JPEG", quality=90))
    (tmp_path / "cat.png").write_bytes(encode(photos["chelsea"], "PNG"))
    (tmp_path / "coffee.jpg").write_bytes(encode(photos["coffee"], "JPEG", quality=90))
    monkeypatch.chdir(tmp_path)
    code = readme_example().replace("localhost:8001", server.options.grpc_url)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), {})  # noqa: S102 - the README's own example
    lines = out.getvalue().splitlines()
    assert "espresso (1280,)" in out.getvalue() and len(lines) == 3 + 2 * 3, out.getvalue()
