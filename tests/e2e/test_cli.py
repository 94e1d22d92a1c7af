"""The `tritonprep` command line against a real server: output formats and one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tritonprep_testkit.servers import free_ports

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
    assert r.returncode == 2 and r.stderr.strip() == (
        "tritonprep: error: --top-k 50: model 'classify' returns at most 5 classes per image; raise the limit with "
        "`tritonprep model add NAME --onnx FILE --top-k 50` for a network you add, or the dims of SCORES, CLASS_IDS "
        "and LABELS in its configs (docs/your-network.md#top-k)"
    )
    r = run_cli("classify", str(image_dir), "--url", "ftp://x:1")
    assert r.returncode == 1 and "unsupported URL scheme 'ftp'" in r.stderr


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_multi_image_requests_still_fail_only_the_bad_files(server, image_dir, photos, tmp_path, protocol):
    """--batch-size 8 packs the files into one request; two corrupt files in it get their own errors,
    the good ones their predictions, in argument order."""
    from tritonprep_testkit.photos import encode

    (tmp_path / "a_bad.jpg").write_bytes(b"\xff\xd8\xff\xe0 this is not a JPEG")
    (tmp_path / "b_good.png").write_bytes(encode(photos["coffee"], "PNG"))
    (tmp_path / "c_truncated.jpg").write_bytes((image_dir / "chelsea.jpg").read_bytes()[:3000])
    (tmp_path / "d_good.jpg").write_bytes((image_dir / "chelsea.jpg").read_bytes())
    url = server.options.grpc_url if protocol == "grpc" else server.options.http_url
    r = run_cli("classify", str(tmp_path), "--url", url, "--json", "--batch-size", "8", "--top-k", "1")
    assert r.returncode == 1, r.stderr
    lines = [json.loads(line) for line in r.stdout.splitlines()]
    assert [Path(x["file"]).name for x in lines] == ["a_bad.jpg", "b_good.png", "c_truncated.jpg", "d_good.jpg"]
    assert "error" in lines[0] and "error" in lines[2] and not lines[0]["error"].startswith("image ")
    assert "truncated" in lines[2]["error"]
    assert lines[1]["predictions"][0]["index"] == 967 and lines[3]["predictions"][0]["index"] in {281, 282, 285}


def test_verbose_shows_how_each_image_was_decoded_and_transformed(server, image_dir):
    r = run_cli("classify", str(image_dir / "chelsea.jpg"), "--url", server.options.grpc_url, "--verbose", "--json")
    assert r.returncode == 0, r.stderr
    prov = json.loads(r.stdout)["provenance"]
    assert prov == {
        "width": 451,
        "height": 300,
        "decoder": "cpu",
        "PIXELS": {"scale": [round(384 / 451, 6), round(256 / 300, 6)], "padding": [-80, -16, -80, -16]},
    }
    r = run_cli("classify", str(image_dir / "chelsea.jpg"), "--url", server.options.grpc_url, "--verbose")
    assert r.returncode == 0 and r.stdout.splitlines()[-1].strip() == (
        "decoded by cpu, 451x300; PIXELS scale 0.8514 x 0.8533, padding l-80 t-16 r-80 b-16"
    )


def test_embed_json_and_npy(server, image_dir, photos, tmp_path):
    from tritonprep_testkit.photos import encode

    (tmp_path / "chelsea.png").write_bytes(encode(photos["chelsea"], "PNG"))
    files = [str(image_dir / "chelsea.jpg"), str(tmp_path / "chelsea.png"), str(image_dir / "coffee.png")]
    r = run_cli("embed", *files, "--url", server.options.grpc_url, "--json", "--verbose")
    assert r.returncode == 0, r.stderr
    lines = [json.loads(line) for line in r.stdout.splitlines()]
    emb = np.array([x["embedding"] for x in lines], np.float32)
    assert emb.shape == (3, 1280)
    np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-4)
    assert emb[0] @ emb[1] >= 0.99 and emb[0] @ emb[2] < 0.5
    assert lines[0]["provenance"]["EMBED_PIXELS"]["padding"] == [-56, 0, -56, 0]
    out = tmp_path / "emb.npy"
    r = run_cli("embed", *files, str(tmp_path / "missing.jpg"), "--url", server.options.http_url, "--npy", str(out))
    assert r.returncode == 1 and "missing.jpg: no such file or directory" in r.stderr
    assert r.stdout.splitlines() == [f"{f}  row {i}" for i, f in enumerate(files)]
    saved = np.load(out)
    assert saved.shape == (3, 1280) and saved.dtype == np.float32
    np.testing.assert_allclose(saved, emb, atol=1e-5)


def test_batch_size_is_checked(server, image_dir):
    r = run_cli("embed", str(image_dir), "--url", server.options.grpc_url, "--batch-size", "65")
    assert r.returncode == 2 and "--batch-size must be between 1 and 64" in r.stderr


def test_http_to_the_grpc_port_is_one_clear_line(server, image_dir):
    grpc = server.options.grpc_url
    r = run_cli("classify", str(image_dir / "chelsea.jpg"), "--url", f"http://{grpc}")
    assert r.returncode == 1 and r.stdout == "" and "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"tritonprep: error: {grpc} does not speak HTTP"), r.stderr
    assert f"grpc://{grpc}" in lines[0] and "gRPC port (8001 by default)" in lines[0]


def test_npy_output_is_checked_before_anything_is_sent(image_dir, tmp_path):
    [port] = free_ports(1)  # nothing listens there: a check after connecting would say so instead
    out = tmp_path / "missing" / "e.npy"
    r = run_cli("embed", str(image_dir), "--url", f"127.0.0.1:{port}", "--npy", str(out))
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip() == f"tritonprep: error: --npy {out}: folder {out.parent} does not exist"
