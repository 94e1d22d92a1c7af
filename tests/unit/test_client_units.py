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
        ("T/empty", "folder holds no image files (.jpg .png .webp .bmp .gif .tiff .jp2)"),
    ]


def test_prediction_json():
    assert Prediction(285, "Egyptian cat", 0.123456789).as_dict() == {
        "index": 285,
        "label": "Egyptian cat",
        "score": 0.123457,
    }


def _args(*argv: str):
    from tritonprep_client.cli import build_parser

    return build_parser().parse_args(list(argv))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["classify", "x.jpg", "--top-k", "0"], "--top-k must be at least 1"),
        (["embed", "x.jpg", "--batch-size", "65"], "--batch-size must be between 1 and 64"),
    ],
)
def test_arguments_the_server_cannot_satisfy_are_usage_errors(argv, message):
    from tritonprep_client.cli import UsageError, check_arguments

    with pytest.raises(UsageError, match=message):
        check_arguments(_args(*argv))


def test_each_file_gets_its_answer_or_its_error_in_one_json_line(tmp_path):
    import io
    import json

    from tritonprep_client.cli import Answers, expand_paths, read_files
    from tritonprep_client.client import ImageResult
    from tritonprep_client.errors import InferenceFailed, ServerUnavailable

    (tmp_path / "a.jpg").write_bytes(b"a")
    (tmp_path / "b.jpg").write_bytes(b"b")
    out, err = io.StringIO(), io.StringIO()
    answers = Answers(_args("classify", str(tmp_path), "--json"), out, err)
    readable = read_files(expand_paths([str(tmp_path), str(tmp_path / "gone.png")]), answers)
    assert [(name.replace(str(tmp_path), "T"), data) for name, data in readable] == [
        ("T/a.jpg", b"a"),
        ("T/b.jpg", b"b"),
    ]
    answers.answer("T/a.jpg", ImageResult(predictions=[Prediction(285, "Egyptian cat", 0.5)]))
    answers.answer("T/b.jpg", InferenceFailed.from_server("image 1 of 2 [decode]: truncated"))
    with pytest.raises(ServerUnavailable):
        answers.answer("T/c.jpg", ServerUnavailable("cannot reach Triton"))
    assert answers.finish() == 1 and err.getvalue() == ""
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert lines[0]["file"].endswith("gone.png") and lines[0]["error"] == "no such file or directory"
    assert lines[1] == {"file": "T/a.jpg", "predictions": [{"index": 285, "label": "Egyptian cat", "score": 0.5}]}
    assert lines[2] == {"file": "T/b.jpg", "error": "image 1 of 2 [decode]: truncated"}
