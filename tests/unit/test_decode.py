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


def test_jpeg2000_files_are_known_sized_from_their_header_and_refused_when_cut(photos):
    from tritonprep.decode import validate
    from tritonprep.decode.headers import header_info
    from tritonprep.errors import DecodeError, LimitExceeded
    from tritonprep.spec import Limits
    from tritonprep_testkit.corpus import j2k_set_size, jp2_set_size

    cat = photos["chelsea"]
    jp2, j2k = encode(cat, "JPEG2000"), encode(cat, "JPEG2000", no_jp2=True)
    for data in (jp2, j2k):
        assert sniff_format(data) == "JPEG2000"
        header = validate(data, Limits())
        assert (header.width, header.height, header.gpu_decodable) == (cat.shape[1], cat.shape[0], True)
        with pytest.raises(DecodeError, match="EOC"):
            validate(data[: len(data) // 2], Limits())
    assert not header_info(encode(cat[..., 0].astype(np.uint16) * 256, "JPEG2000"), "JPEG2000").gpu  # 16-bit: Pillow
    with pytest.raises(LimitExceeded, match="max_pixels"):
        validate(j2k_set_size(j2k, 100_000, 100_000), Limits())
    with pytest.raises(LimitExceeded, match="max_pixels"):
        validate(jp2_set_size(jp2, 100_000, 100_000), Limits())
    with pytest.raises(UnsupportedFormat, match="JPEG2000"):
        check_encoded(j2k, Limits(allowed_formats=("JPEG", "PNG")))


@pytest.mark.parametrize(
    ("kw", "gpu"),
    [
        ({}, True),
        ({"compression": "tiff_lzw"}, True),
        ({"compression": "tiff_adobe_deflate"}, False),  # nvTIFF decodes deflate only with nvCOMP beside it
        ({"compression": "jpeg"}, False),  # nvTIFF's JPEG-in-TIFF may differ from libjpeg's pixels: Pillow
        ({"mode": "RGBA"}, False),
        ({"mode": "L"}, True),
        ({"mode": "I;16"}, False),
    ],
)
def test_tiff_headers_say_which_files_the_gpu_decodes_as_pillow_does(photos, kw, gpu):
    from PIL import Image

    from tritonprep.decode.headers import header_info

    mode = kw.pop("mode", "RGB")
    im = Image.fromarray(photos["coffee"]).convert(mode if mode != "I;16" else "L")
    if mode == "I;16":
        im = Image.fromarray(np.asarray(im).astype(np.uint16) * 256)
    data = encode(im, "TIFF", **kw)
    info = header_info(data, "TIFF")
    assert (info.width, info.height) == im.size and info.gpu is gpu


def test_decode_failures_are_logged_once_a_minute_per_kind_with_their_count():
    import logging

    from tritonprep.decode.failures import FailureLog

    now = [0.0]
    records = []

    class Catch(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    logger = logging.getLogger("test.failures")
    logger.addHandler(Catch())
    logger.setLevel(logging.INFO)
    failures = FailureLog(logger, "GPU executor", interval_s=60, clock=lambda: now[0])
    failures.count("decode", 3, example="image is cut off")
    assert records == ["GPU executor: 3 image(s) decode (e.g. image is cut off)"]
    for t in range(1, 59):
        now[0] = float(t)
        failures.count("decode", example="another")
        failures.count("gpu_fallback")
    assert len(records) == 2 and records[1].startswith("GPU executor: 1 image(s) gpu_fallback")
    now[0] = 61.0
    failures.count("decode")
    assert records[2] == "GPU executor: 59 image(s) decode in the last 60 s (e.g. another)"
    failures.flush()
    assert records[3] == "GPU executor: 57 image(s) gpu_fallback in the last 59 s"
    failures.flush()
    assert len(records) == 4
