"""The per-image error contract (tritonprep.image_errors): what the server writes, the client reads back.

The e2e half (the real server's error for a bad image, over gRPC and HTTP) is in tests/e2e/test_classify.py.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tritonprep import errors, image_errors
from tritonprep.errors import DecodeError, ImageError, LimitExceeded, UnsupportedFormat
from tritonprep.image_errors import REASONS, ImageFailure, parse
from tritonprep.triton.responses import ImageRejected
from tritonprep_client.errors import InferenceFailed


@pytest.mark.parametrize("reason", REASONS)
def test_every_reason_round_trips_through_the_wire_form(reason):
    failure = ImageFailure(2, 8, reason, "cannot decode: truncated [at byte 7]: image 1 of 2")
    text = str(failure)
    assert text == f"image 3 of 8 [{reason}]: cannot decode: truncated [at byte 7]: image 1 of 2"
    assert parse(text) == failure
    # what a client library or an ensemble puts in front of it does not hide it
    assert parse(f"[StatusCode.INVALID_ARGUMENT] in ensemble 'classify', {text}") == failure


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (DecodeError("corrupt JPEG data: premature end of data segment"), "decode"),
        (UnsupportedFormat("GIF images are not allowed (allowed_formats=JPEG)"), "format"),
        (LimitExceeded("image is 65535x65535 pixels, over the limit max_pixels=16800000"), "limit"),
        (ImageError("image is too thin to resize"), "invalid"),
    ],
)
def test_the_servers_refusal_parses_on_the_client_to_index_reason_and_message(error, reason):
    """Server side (the error a model answers with) to client side (what InferenceFailed carries)."""
    rejected = ImageRejected(error, 4, 5)
    assert rejected.reason == reason and str(rejected).startswith(f"image 5 of 5 [{reason}]: ")
    failed = InferenceFailed.from_server(f"[StatusCode.INVALID_ARGUMENT] {rejected}")
    assert failed.image == ImageFailure(4, 5, reason, str(error)) and failed.reason == reason


def test_a_message_that_names_no_image_is_no_image_failure():
    texts = [
        "request carries no image",
        "image 2 of 8: the form without a reason",
        "image 9 of 8 [decode]: x",
        "image 0 of 8 [decode]: x",
        "image 1 of 8 [unknown]: x",
        "preprocess instance is out of service (CUDA error)",
    ]
    for text in texts:
        assert parse(text) is None, text
        assert InferenceFailed.from_server(text).reason is None


def test_a_failure_must_name_an_image_of_its_request_and_a_known_reason():
    with pytest.raises(ValueError, match="outside"):
        ImageFailure(8, 8, "decode", "x")
    with pytest.raises(ValueError, match="unknown refusal reason"):
        ImageFailure(0, 8, "broken", "x")


def test_every_input_error_reason_is_a_contract_reason():
    """The reasons errors.py gives (and the metrics count) are the contract's."""
    classes = [c for c in vars(errors).values() if isinstance(c, type) and issubclass(c, errors.InputError)]
    assert {c.reason for c in classes} | {"internal"} == set(REASONS)


def test_the_contract_imports_without_numpy_or_the_server():
    """A client-only install reads it: importing it loads no numpy and no other part of tritonprep."""
    code = (
        "import sys, tritonprep.image_errors\n"
        "extra = sorted(m for m in sys.modules if m == 'numpy' or m.startswith(('numpy.', 'tritonprep.')))\n"
        "print(extra)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['tritonprep.image_errors']"
    assert image_errors.__file__.endswith("image_errors.py")
