"""Client pieces that need no server: URL resolution and path expansion."""

from __future__ import annotations

import pytest

from tritonprep_client.cli import expand_paths
from tritonprep_client.client import Prediction, parse_url
from tritonprep_client.errors import ClientError


@pytest.mark.parametrize(
    ("url", "protocol", "want"),
    [
        (None, None, ("grpc", "localhost:8001")),
        (None, "http", ("http", "localhost:8000")),
        ("h:1", None, ("grpc", "h:1")),
        ("http://h:2/", None, ("http", "h:2")),
        ("grpc://h:3", "grpc", ("grpc", "h:3")),
    ],
)
def test_parse_url(url, protocol, want):
    assert parse_url(url, protocol) == want


def test_parse_url_rejects_contradictions():
    with pytest.raises(ClientError, match="contradicts"):
        parse_url("http://h:1", "grpc")
    with pytest.raises(ClientError, match="unsupported URL scheme"):
        parse_url("ftp://h:1", None)


def test_expand_paths_lists_images_in_folders_and_reports_problems(tmp_path):
    (tmp_path / "a.JPG").write_bytes(b"x")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.png").write_bytes(b"x")
    (tmp_path / "notes.txt").write_text("x")
    empty = tmp_path / "empty"
    empty.mkdir()
    items = expand_paths([str(tmp_path), str(tmp_path / "nope.jpg"), str(empty)])
    names = [(name.replace(str(tmp_path), "T"), err) for name, _, err in items]
    assert names == [
        ("T/a.JPG", None),
        ("T/sub/b.png", None),
        ("T/nope.jpg", "no such file or directory"),
        ("T/empty", "folder holds no image files (.jpg .png .webp .bmp .gif .tiff)"),
    ]


def test_prediction_json():
    assert Prediction(285, "Egyptian cat", 0.123456789).as_dict() == {
        "index": 285,
        "label": "Egyptian cat",
        "score": 0.123457,
    }
