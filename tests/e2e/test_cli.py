"""The `tritonprep` command line against a real server: output formats and one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tritonprep.launcher.probes import free_ports

pytestmark = pytest.mark.e2e

CLI = Path(sys.executable).with_name("tritonprep")


def run_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([str(CLI), *args], capture_output=True, text=True, timeout=timeout, check=False)


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_json_output_per_image_with_errors_isolated(server, image_dir, tmp_path, protocol):
    bad = tmp_path / "bad.jpg"
    bad.write_bytes(b"\xff\xd8\xff\xe0 this is not a JPEG")
    url = server.options.grpc_url if protocol == "grpc" else server.options.http_url
    r = run_cli(
        "classify",
        str(image_dir),
        str(bad),
        str(tmp_path / "missing.png"),
        "--protocol",
        protocol,
        "--url",
        url,
        "--json",
        "--top-k",
        "3",
    )
    assert r.returncode == 1, r.stderr
    lines = [json.loads(line) for line in r.stdout.splitlines()]
    by_file = {Path(x["file"]).name: x for x in lines}
    assert set(by_file) == {"chelsea.jpg", "coffee.png", "rocket.jpg", "bad.jpg", "missing.png"}
    cat = by_file["chelsea.jpg"]["predictions"]
    assert len(cat) == 3 and cat[0]["index"] in {281, 282, 285}
    assert set(cat[0]) == {"index", "label", "score"} and 0 < cat[0]["score"] <= 1
    assert by_file["coffee.png"]["predictions"][0] == {
        **by_file["coffee.png"]["predictions"][0],
        "index": 967,
        "label": "espresso",
    }
    assert "corrupt JPEG" in by_file["bad.jpg"]["error"] or "truncated" in by_file["bad.jpg"]["error"]
    assert by_file["missing.png"]["error"] == "no such file or directory"
    assert r.stderr == ""  # no progress bar when stderr is not a terminal


def test_text_output_and_error_lines(server, image_dir, tmp_path):
    r = run_cli(
        "classify",
        str(image_dir / "chelsea.jpg"),
        str(tmp_path / "nope.jpg"),
        "--url",
        server.options.grpc_url,
        "--top-k",
        "2",
    )
    assert r.returncode == 1
    out = r.stdout.splitlines()
    assert out[0].endswith("chelsea.jpg") and out[1].lstrip().startswith("1. ") and out[2].lstrip().startswith("2. ")
    assert "(class 28" in out[1] and "%" in out[1] and len(out) == 3
    assert r.stderr.strip() == f"tritonprep: error: {tmp_path / 'nope.jpg'}: no such file or directory"


def test_unreachable_server_is_one_line(image_dir):
    [port] = free_ports(1)
    for protocol in ("grpc", "http"):
        r = run_cli(
            "classify",
            str(image_dir / "chelsea.jpg"),
            "--protocol",
            protocol,
            "--url",
            f"127.0.0.1:{port}",
            "--timeout",
            "5",
        )
        assert r.returncode == 1
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("tritonprep: error: cannot reach Triton at"), r.stderr
        assert r.stdout == ""


def test_usage_errors(server, image_dir):
    r = run_cli("classify", str(image_dir / "chelsea.jpg"), "--url", server.options.grpc_url, "--top-k", "50")
    assert (
        r.returncode == 2
        and r.stderr.strip() == "tritonprep: error: --top-k 50: the server returns at most 5 classes per image"
    )
    r = run_cli("classify", str(image_dir), "--url", "ftp://x:1")
    assert r.returncode == 1 and "unsupported URL scheme 'ftp'" in r.stderr
