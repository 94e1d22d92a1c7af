"""CPU decoding: formats, limits, orientation, colour modes, and malformed input."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from tritonprep.decode import check_encoded, sniff_format
from tritonprep.decode.jpeg import parse_jpeg
from tritonprep.decode.pillow import decode_rgb
from tritonprep.errors import DecodeError, LimitExceeded, UnsupportedFormat
from tritonprep.spec import Limits
from tritonprep_testkit.photos import encode

LIMITS = Limits()


def test_formats_are_sniffed_from_their_signatures(photos):
    small = photos["chelsea"][:40, :60]
    for fmt in ("JPEG", "PNG", "WEBP", "BMP", "GIF", "TIFF"):
        assert sniff_format(encode(small, fmt)) == fmt
    assert sniff_format(b"hello") is None


@pytest.mark.parametrize("fmt", ["JPEG", "PNG", "WEBP", "BMP", "TIFF"])
def test_every_allowed_format_decodes_to_upright_rgb(photos, fmt):
    arr = photos["coffee"][:64, :96]
    kw = {"quality": 95} if fmt in ("JPEG", "WEBP") else {}
    got = decode_rgb(encode(arr, fmt, **kw), LIMITS)
    assert got.shape == (64, 96, 3) and got.dtype == np.uint8
    lossy = fmt in ("JPEG", "WEBP")
    assert np.abs(got.astype(int) - arr).mean() < (3 if lossy else 1e-9)


def test_jpeg_header_walk(jpegs, photos):
    h = parse_jpeg(jpegs["chelsea"], 100)
    assert (h.width, h.height, h.components, h.progressive, h.scans) == (451, 300, 3, False, 1)
    prog = encode(photos["chelsea"], "JPEG", quality=90, progressive=True)
    hp = parse_jpeg(prog, 100)
    assert hp.progressive and hp.scans > 1
    with pytest.raises(LimitExceeded, match=r"has \d+ scans, over the limit max_progressive_scans=2"):
        parse_jpeg(prog, 2)


@pytest.mark.parametrize("cut", [3, 20, 200, 0.5, 0.99])
def test_truncated_jpegs_are_rejected_not_half_decoded(jpegs, cut):
    data = jpegs["coffee"]
    n = int(len(data) * cut) if isinstance(cut, float) else cut
    with pytest.raises(DecodeError, match="truncated|corrupt"):
        decode_rgb(data[:n], LIMITS)


def test_a_jpeg_missing_only_its_end_marker_is_rejected(jpegs):
    with pytest.raises(DecodeError, match="end-of-image"):
        decode_rgb(jpegs["coffee"][:-2], LIMITS)


@pytest.mark.parametrize(
    ("data", "error", "needle"),
    [
        (b"", DecodeError, "empty input"),
        (b"\x00" * 64, DecodeError, "unknown file signature"),
        (b"\xff\xd8\xff\xd9", DecodeError, "no frame"),
        (b"\x89PNG\r\n\x1a\n" + b"\x00" * 30, DecodeError, "corrupt PNG"),
    ],
)
def test_malformed_inputs_raise_decode_errors(data, error, needle):
    with pytest.raises(error, match=needle):
        decode_rgb(data, LIMITS)


def test_limits_are_checked_before_decoding(photos, jpegs):
    with pytest.raises(LimitExceeded, match="max_encoded_bytes=1000"):
        check_encoded(jpegs["chelsea"], Limits(max_encoded_bytes=1000))
    with pytest.raises(LimitExceeded, match="451x300 = 135300 pixels, over the limit max_pixels=100000"):
        decode_rgb(jpegs["chelsea"], Limits(max_pixels=100_000))
    png = encode(photos["chelsea"], "PNG")
    with pytest.raises(LimitExceeded, match="max_pixels"):
        decode_rgb(png, Limits(max_pixels=100_000))
    with pytest.raises(UnsupportedFormat, match="PNG is not allowed"):
        decode_rgb(png, Limits(allowed_formats=("JPEG",)))


def test_exif_orientation_is_applied(photos):
    arr = photos["rocket"][:80, :120]  # landscape
    im = Image.fromarray(arr)
    exif = im.getexif()
    exif[0x0112] = 6  # rotate 90 CW to display
    buf = io.BytesIO()
    im.save(buf, "JPEG", quality=95, exif=exif)
    got = decode_rgb(buf.getvalue(), LIMITS)
    assert got.shape == (120, 80, 3)
    want = np.rot90(arr, k=-1)
    assert np.abs(got.astype(int) - want).mean() < 3


@pytest.mark.parametrize("mode", ["L", "CMYK", "RGBA", "P", "LA", "I;16"])
def test_colour_modes_become_rgb(photos, mode):
    rgb = Image.fromarray(photos["astronaut"][:64, :64])
    if mode == "I;16":
        gray = np.asarray(rgb.convert("L")).astype(np.uint16) * 257
        im = Image.fromarray(gray)
        assert im.mode == "I;16"
        fmt = "PNG"
    else:
        im = rgb.convert(mode)
        fmt = "JPEG" if mode in ("L", "CMYK") else "PNG"
    buf = io.BytesIO()
    im.save(buf, fmt)
    got = decode_rgb(buf.getvalue(), LIMITS)
    assert got.shape == (64, 64, 3) and got.dtype == np.uint8
    want = np.asarray(im.convert("RGB")) if mode != "I;16" else np.repeat(np.asarray(rgb.convert("L"))[..., None], 3, 2)
    assert np.abs(got.astype(int) - want.astype(int)).mean() < 4, mode


def test_exif_orientation_of_the_marker_walk_agrees_with_pillow():
    """The GPU executor trusts the walk's orientation (nvImageCodec applies it) only where it is
    well-formed; there it must be what Pillow (the CPU executor) reads, and every broken EXIF
    orientation in the corpus must be flagged (None), which sends the image to Pillow."""
    import io

    from PIL import Image

    from tritonprep.decode.jpeg import parse_jpeg
    from tritonprep_testkit.corpus import build

    checked = 0
    for item in build():
        if not item.data.startswith(b"\xff\xd8") or item.expect != "ok":
            continue
        header = parse_jpeg(item.data, 100)
        if item.group == "exif-broken" and item.name.startswith("exif-broken/orientation-"):
            assert header.orientation is None, item.name
        if header.orientation is not None:
            assert header.orientation == Image.open(io.BytesIO(item.data)).getexif().get(0x0112, 1), item.name
            checked += 1
    assert checked > 20
    assert {parse_jpeg(it.data, 100).orientation for it in build() if it.name.startswith("orientation/jpeg-")} == set(
        range(1, 9)
    )
