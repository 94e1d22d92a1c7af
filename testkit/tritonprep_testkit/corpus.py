"""A corpus of hostile and unusual images, generated from real photos (scikit-image's samples).

Each :class:`Item` says what a correct decoder must do with it:

* ``ok``: decode to ``want`` (upright RGB) within ``tol`` (mean absolute difference);
* ``error``: raise one of ``errors`` (:class:`~tritonprep.errors.ImageError` subclasses);
* ``any``: either decode to an image of ``shape`` or raise a clean ``ImageError`` (bit flips:
  a damaged but complete file may still decode to something).

Nothing is read from disk or the network; the corpus is deterministic (fixed seeds). Used by
tests/unit/test_hostile_corpus.py, tests/e2e/test_hostile.py and as the fuzzer's seeds
(scripts/fuzz.py). ``python -m tritonprep_testkit.corpus OUT_DIR`` writes it out as files.
"""

from __future__ import annotations

import argparse
import struct
import sys
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

from tritonprep.errors import DecodeError, ImageError, LimitExceeded, UnsupportedFormat

from .photos import encode, load_photos


@dataclass(frozen=True)
class Item:
    """One corpus entry and the behaviour it demands."""

    name: str
    data: bytes
    expect: str  # "ok" | "error" | "any"
    want: np.ndarray | None = None  # expect == "ok": upright RGB reference
    tol: float = 0.0  # expect == "ok": allowed mean |got - want|
    errors: tuple[type[ImageError], ...] = (ImageError,)  # expect == "error"
    shape: tuple[int, int] | None = None  # expect == "any": (h, w) when it decodes

    @property
    def group(self) -> str:
        """The family of the item (the part of its name before the first '/')."""
        return self.name.split("/", 1)[0]


def photos() -> dict[str, np.ndarray]:
    """Small crops of real photos (kept small so that the corpus decodes quickly)."""
    full = load_photos()
    return {
        "chelsea": full["chelsea"][:240, :320].copy(),  # landscape 320x240
        "rocket": full["rocket"][:300, :200].copy(),  # portrait 200x300
        "astronaut": full["astronaut"][::2, ::2].copy(),  # 256x256
        "coffee": full["coffee"][:200, :300].copy(),
    }


# ------------------------------------------------------------------ byte-level surgery
def chunk(kind: bytes, body: bytes) -> bytes:
    """A PNG chunk with a correct CRC."""
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)


def png_raw(
    width: int, height: int, rows: bytes, bit_depth: int = 8, colour_type: int = 2, extra: bytes = b""
) -> bytes:
    """A PNG built by hand: IHDR (any size), ``extra`` chunks, one IDAT of ``rows`` (already filtered), IEND."""
    ihdr = struct.pack(">IIBBBBB", width, height, bit_depth, colour_type, 0, 0, 0)
    idat = chunk(b"IDAT", zlib.compress(rows, 9))
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + extra + idat + chunk(b"IEND", b"")


def jpeg_sof_offset(data: bytes) -> int:
    """Offset of the frame header's marker (0xFFC0..) in a JPEG written by Pillow."""
    pos = 2
    while pos < len(data):
        marker = data[pos + 1]
        if marker in (0xC0, 0xC1, 0xC2):
            return pos
        pos += 2 + int.from_bytes(data[pos + 2 : pos + 4], "big")
    raise ValueError("no SOF")


def jpeg_set_size(data: bytes, width: int, height: int) -> bytes:
    """The JPEG with its frame header announcing ``width`` x ``height``."""
    sof = jpeg_sof_offset(data)
    return data[: sof + 5] + struct.pack(">HH", height, width) + data[sof + 9 :]


def jpeg_insert(data: bytes, segments: bytes) -> bytes:
    """Insert marker segments right after SOI."""
    return data[:2] + segments + data[2:]


def segment(marker: int, body: bytes) -> bytes:
    """A JPEG marker segment (``body`` at most 65533 bytes)."""
    return bytes((0xFF, marker)) + struct.pack(">H", len(body) + 2) + body


def flip_bits(data: bytes, positions: list[int]) -> bytes:
    """``data`` with one bit flipped at each byte position."""
    b = bytearray(data)
    for i, p in enumerate(positions):
        b[p] ^= 1 << (i % 8)
    return bytes(b)


def exif_bytes(orientation_payload: bytes) -> bytes:
    """An APP1 Exif body around a raw little-endian TIFF structure."""
    return b"Exif\x00\x00" + orientation_payload


def exif_with_orientation(value: int, type_code: int = 3) -> bytes:
    """A minimal valid Exif TIFF block holding Orientation=``value`` (tag 0x0112)."""
    ifd = struct.pack("<H", 1) + struct.pack("<HHIHH", 0x0112, type_code, 1, value, 0) + struct.pack("<I", 0)
    return exif_bytes(b"II*\x00" + struct.pack("<I", 8) + ifd)


# ------------------------------------------------------------------ orientation references
def orient(arr: np.ndarray, orientation: int) -> np.ndarray:
    """How a viewer displays stored pixels ``arr`` tagged with EXIF ``orientation`` (TIFF 6.0 semantics)."""
    transforms: dict[int, Callable[[np.ndarray], np.ndarray]] = {
        1: lambda a: a,
        2: lambda a: a[:, ::-1],  # mirrored left-right
        3: lambda a: a[::-1, ::-1],  # rotated 180
        4: lambda a: a[::-1, :],  # mirrored top-bottom
        5: lambda a: a.transpose(1, 0, 2),  # mirrored along the main diagonal
        6: lambda a: np.rot90(a, k=-1),  # rotate 90 degrees clockwise to display
        7: lambda a: a[::-1, ::-1].transpose(1, 0, 2),  # mirrored along the anti-diagonal
        8: lambda a: np.rot90(a, k=1),  # rotate 90 degrees counter-clockwise to display
    }
    return np.ascontiguousarray(transforms[orientation](arr))


# ------------------------------------------------------------------ the corpus
def build() -> list[Item]:
    """Every corpus item (about 400, a few MB; builds in a few seconds)."""
    p = photos()
    cat, rocket, astro, coffee = p["chelsea"], p["rocket"], p["astronaut"], p["coffee"]
    items: list[Item] = []

    def ok(name: str, data: bytes, want: np.ndarray, tol: float) -> None:
        items.append(Item(name, data, "ok", want=want, tol=tol))

    def err(name: str, data: bytes, *errors: type[ImageError]) -> None:
        items.append(Item(name, data, "error", errors=errors or (ImageError,)))

    def maybe(name: str, data: bytes, shape: tuple[int, int]) -> None:
        items.append(Item(name, data, "any", shape=shape))

    gray = np.asarray(Image.fromarray(astro).convert("L"))
    # ---- valid images of every format and colour mode
    jpeg = encode(cat, "JPEG", quality=92)
    prog = encode(cat, "JPEG", quality=92, progressive=True)
    ok("valid/jpeg-baseline", jpeg, cat, 3)
    ok("valid/jpeg-progressive", prog, cat, 3)
    ok("valid/jpeg-444", encode(coffee, "JPEG", quality=95, subsampling=0), coffee, 2)
    ok("valid/jpeg-restart-markers", encode(coffee, "JPEG", quality=95, restart_marker_blocks=4), coffee, 3)
    ok("valid/jpeg-gray", encode(gray, "JPEG", quality=95), np.repeat(gray[..., None], 3, 2), 2)
    cmyk = Image.fromarray(astro).convert("CMYK")
    ok("valid/jpeg-cmyk", encode(cmyk, "JPEG", quality=95), np.asarray(cmyk.convert("RGB")), 4)
    ok("valid/jpeg-1x1", encode(cat[:1, :1], "JPEG", quality=95), cat[:1, :1], 12)
    ok("valid/png-rgb", encode(rocket, "PNG"), rocket, 0)
    ok("valid/png-rgba", encode(Image.fromarray(rocket).convert("RGBA"), "PNG"), rocket, 0)
    ok("valid/png-gray", encode(gray, "PNG"), np.repeat(gray[..., None], 3, 2), 0)
    ok("valid/png-gray-alpha", encode(Image.fromarray(gray).convert("LA"), "PNG"), np.repeat(gray[..., None], 3, 2), 0)
    pal = Image.fromarray(astro).quantize(64)
    ok("valid/png-palette", encode(pal, "PNG"), np.asarray(pal.convert("RGB")), 0)
    pal_t = pal.copy()
    pal_t.info["transparency"] = 0
    ok("valid/png-palette-transparency", encode(pal_t, "PNG"), np.asarray(pal.convert("RGB")), 0)
    bilevel = Image.fromarray(gray).convert("1")
    ok("valid/png-1bit", encode(bilevel, "PNG"), np.asarray(bilevel.convert("RGB")), 0)
    g16 = gray.astype(np.uint16) * 257  # the high byte is the 8-bit value
    ok("valid/png-16bit-gray", encode(Image.fromarray(g16), "PNG"), np.repeat(gray[..., None], 3, 2), 0)
    rgb16 = rocket.astype(np.uint16) * 256 + 200  # high byte = the photo
    rows = b"".join(b"\x00" + rgb16[y].astype(">u2").tobytes() for y in range(rgb16.shape[0]))
    ok("valid/png-16bit-rgb", png_raw(rgb16.shape[1], rgb16.shape[0], rows, bit_depth=16), rocket, 0)
    ok("valid/png-1x1", encode(cat[:1, :1], "PNG"), cat[:1, :1], 0)
    tall = np.ascontiguousarray(np.resize(rocket[:, 100:101], (20000, 1, 3)))
    ok("valid/png-1x20000", encode(tall, "PNG"), tall, 0)
    wide = np.ascontiguousarray(tall.transpose(1, 0, 2))
    ok("valid/png-20000x1", encode(wide, "PNG"), wide, 0)
    ok("valid/webp-lossless", encode(coffee, "WEBP", lossless=True), coffee, 0)
    ok("valid/webp-lossy", encode(coffee, "WEBP", quality=95), coffee, 4)
    frames = [Image.fromarray(coffee), Image.fromarray(coffee[::-1].copy()), Image.fromarray(255 - coffee)]
    ok(
        "valid/webp-animated",
        encode(frames[0], "WEBP", lossless=True, save_all=True, append_images=frames[1:]),
        coffee,
        0,
    )
    gif_pal = Image.fromarray(coffee).quantize(256)
    ok("valid/gif", encode(gif_pal, "GIF"), np.asarray(gif_pal.convert("RGB")), 0)
    gif_frames = [gif_pal] + [Image.fromarray(f).quantize(256) for f in (coffee[::-1].copy(), 255 - coffee)]
    ok(
        "valid/gif-animated",
        encode(gif_pal, "GIF", save_all=True, append_images=gif_frames[1:]),
        np.asarray(gif_pal.convert("RGB")),
        0,
    )
    ok("valid/bmp-24", encode(rocket, "BMP"), rocket, 0)
    ok("valid/bmp-8-palette", encode(pal, "BMP"), np.asarray(pal.convert("RGB")), 0)
    ok("valid/tiff-raw", encode(cat, "TIFF"), cat, 0)
    ok("valid/tiff-lzw", encode(cat, "TIFF", compression="tiff_lzw"), cat, 0)
    ok("valid/tiff-deflate", encode(cat, "TIFF", compression="tiff_adobe_deflate"), cat, 0)
    ok("valid/tiff-jpeg", encode(cat, "TIFF", compression="jpeg", quality=95), cat, 3)
    ok(
        "valid/tiff-multipage",
        encode(Image.fromarray(cat), "TIFF", save_all=True, append_images=[Image.fromarray(255 - cat)]),
        cat,
        0,
    )
    ok("valid/tiff-16bit-gray", encode(Image.fromarray(g16), "TIFF"), np.repeat(gray[..., None], 3, 2), 0)
    ok("valid/tiff-gray", encode(gray, "TIFF", compression="tiff_lzw"), np.repeat(gray[..., None], 3, 2), 0)
    # JPEG 2000: a JP2 file and a bare J2K codestream (lossless: Pillow's default), a lossy one, a gray one
    j2k = encode(cat, "JPEG2000", no_jp2=True)
    ok("valid/jpeg2000-jp2", encode(cat, "JPEG2000"), cat, 0)
    ok("valid/jpeg2000-j2k", j2k, cat, 0)
    ok("valid/jpeg2000-lossy", encode(coffee, "JPEG2000", quality_mode="rates", quality_layers=[20]), coffee, 12)
    ok("valid/jpeg2000-gray", encode(gray, "JPEG2000", no_jp2=True), np.repeat(gray[..., None], 3, 2), 0)
    flt = gray.astype(np.float32) / 255.0
    ok(
        "valid/tiff-float",
        encode(Image.fromarray(flt, "F"), "TIFF"),
        np.repeat(((flt - flt.min()) * (255 / (flt.max() - flt.min())) + 0.5).astype(np.uint8)[..., None], 3, 2),
        0.01,
    )

    # ---- all 8 EXIF orientations (JPEG and its Exif APP1; TIFF and PNG eXIf are covered by Pillow the same way)
    stored = cat[:120, :200]  # landscape, so that 90-degree turns change the shape
    for o in range(1, 9):
        im = Image.fromarray(stored)
        exif = im.getexif()
        exif[0x0112] = o
        ok(f"orientation/jpeg-{o}", encode(im, "JPEG", quality=95, exif=exif), orient(stored, o), 3)
        ok(f"orientation/png-{o}", encode(im, "PNG", exif=exif), orient(stored, o), 0)
    # ---- broken EXIF: the image still decodes in its stored orientation
    base = encode(stored, "JPEG", quality=95)
    broken = {
        "garbage": exif_bytes(b"\xde\xad\xbe\xef" * 8),
        "bad-ifd-offset": exif_bytes(b"II*\x00" + struct.pack("<I", 0x7FFFFFF0)),
        "orientation-0": exif_with_orientation(0),
        "orientation-9": exif_with_orientation(9),
        "orientation-65535": exif_with_orientation(65535),
        "orientation-as-ascii": exif_with_orientation(6, type_code=2),
        "orientation-bad-type": exif_with_orientation(6, type_code=99),
        "ifd-count-huge": exif_bytes(b"II*\x00" + struct.pack("<I", 8) + struct.pack("<H", 0xFFFF)),
        "ifd-loop": exif_bytes(b"II*\x00" + struct.pack("<I", 8) + struct.pack("<H", 0) + struct.pack("<I", 8)),
        "header-only": b"Exif\x00\x00",
        "big-endian-truncated": exif_bytes(b"MM\x00*\x00\x00\x00\x08\x00"),
    }
    for name, body in broken.items():
        ok(f"exif-broken/{name}", jpeg_insert(base, segment(0xE1, body)), stored, 3)

    # ---- huge APPn / COM markers: each at most 64 KiB, many of them (13 MB in all)
    big = b"\x00" * 65533
    ok("markers/200-app15", jpeg_insert(base, segment(0xEF, big) * 200), stored, 3)
    ok("markers/200-com", jpeg_insert(base, segment(0xFE, big) * 200), stored, 3)
    icc = segment(0xE2, b"ICC_PROFILE\x00\x01\x01" + big[:60000])
    ok("markers/icc-app2-garbage", jpeg_insert(base, icc), stored, 3)
    ok(
        "markers/app1-xmp-huge",
        jpeg_insert(base, segment(0xE1, b"http://ns.adobe.com/xap/1.0/\x00" + big[:65000])),
        stored,
        3,
    )
    ok("markers/trailing-garbage", jpeg + b"\x00garbage after EOI" * 100, cat, 3)

    # ---- empty input and wrong magic bytes
    err("magic/empty", b"", DecodeError)
    err("magic/one-byte", b"\xff", DecodeError)
    err("magic/soi-only", b"\xff\xd8", DecodeError)
    err("magic/soi-eoi", b"\xff\xd8\xff\xd9", DecodeError)
    err("magic/text", b"hello world, not an image", DecodeError)
    err("magic/zeros", b"\x00" * 4096, DecodeError)
    err("magic/pdf", b"%PDF-1.7\n" + b"\x00" * 100, DecodeError)
    err("magic/zip", b"PK\x03\x04" + b"\x00" * 100, DecodeError)
    err("magic/svg", b'<svg xmlns="http://www.w3.org/2000/svg" width="99999" height="99999"/>', DecodeError)
    err("magic/jpeg-magic-png-body", b"\xff\xd8\xff" + encode(rocket, "PNG")[3:], DecodeError)
    err("magic/png-magic-jpeg-body", b"\x89PNG\r\n\x1a\n" + jpeg[8:], DecodeError)
    err("magic/gif-magic-only", b"GIF89a", DecodeError)
    err("magic/bmp-magic-only", b"BM", DecodeError)
    err("magic/tiff-magic-only", b"II*\x00", DecodeError)
    err("magic/riff-webp-only", b"RIFF\x00\x00\x00\x00WEBP", DecodeError)
    err("magic/first-byte-flipped", b"\xfe" + jpeg[1:], DecodeError)

    # ---- frame headers announcing nonsense sizes
    err("sof/width-0", jpeg_set_size(jpeg, 0, 240), DecodeError)
    err("sof/height-0", jpeg_set_size(jpeg, 320, 0), DecodeError)
    err("sof/65535x65535", jpeg_set_size(jpeg, 65535, 65535), LimitExceeded)
    err("sof/65535x1000", jpeg_set_size(jpeg, 65535, 1000), LimitExceeded)
    maybe("sof/65535x1", jpeg_set_size(jpeg, 65535, 1), (1, 65535))
    maybe("sof/1x65535", jpeg_set_size(jpeg, 1, 65535), (65535, 1))
    maybe("sof/smaller-than-data", jpeg_set_size(jpeg, 100, 50), (50, 100))
    maybe("sof/larger-than-data", jpeg_set_size(jpeg, 640, 480), (480, 640))
    sof = jpeg_sof_offset(jpeg)
    err(
        "sof/two-frame-headers",
        jpeg[:sof] + jpeg[sof : sof + 2 + int.from_bytes(jpeg[sof + 2 : sof + 4], "big")] + jpeg[sof:],
        DecodeError,
    )
    err("sof/zero-components", jpeg[: sof + 9] + b"\x00" + jpeg[sof + 10 :], DecodeError)
    err("sof/no-frame-header", jpeg[:sof] + b"\xff\xfe" + jpeg[sof + 2 :], DecodeError)
    # too many progressive scans: repeat the first (DC) scan of a progressive file
    sos = prog.index(b"\xff\xda")
    nxt = prog.index(b"\xff\xc4", sos) if b"\xff\xc4" in prog[sos:] else prog.index(b"\xff\xda", sos + 2)
    err("sof/150-scans", prog[:nxt] + prog[sos:nxt] * 150 + prog[nxt:], LimitExceeded)

    # ---- bombs: headers announcing huge pictures, and small files that inflate a lot
    err("bomb/png-ihdr-100000x100000", png_raw(100_000, 100_000, b"\x00" * 10), LimitExceeded)
    err("bomb/png-ihdr-2^31", png_raw(2**31 - 1, 2**31 - 1, b"\x00" * 10), ImageError)
    err("bomb/png-5000x5000-zeros", png_raw(5000, 5000, bytes(5000 * (1 + 5000 * 3))), LimitExceeded)
    ok(
        "bomb/png-4096x4096-zeros-within-limit",
        png_raw(4096, 4096, bytes(4096 * (1 + 4096))[: 4096 * 4097], colour_type=0),
        np.zeros((4096, 4096, 3), np.uint8),
        0,
    )
    ztxt = chunk(b"zTXt", b"bomb\x00\x00" + zlib.compress(b"A" * (64 << 20), 9))
    small = png_raw(8, 8, b"\x00" * (8 * 25))
    err("bomb/png-ztxt-64MB", small[:33] + ztxt + small[33:], DecodeError)
    many = b"".join(chunk(b"zTXt", b"k%d\x00\x00" % i + zlib.compress(b"B" * (1 << 20), 9)) for i in range(80))
    err("bomb/png-80-ztxt-1MB-each", small[:33] + many + small[33:], DecodeError)
    iccp = chunk(b"iCCP", b"icc\x00\x00" + zlib.compress(b"\x00" * (64 << 20), 9))
    maybe("bomb/png-iccp-64MB", small[:33] + iccp + small[33:], (8, 8))
    err(
        "bomb/gif-screen-65535x65535",
        b"GIF89a" + struct.pack("<HH", 65535, 65535) + encode(gif_pal, "GIF")[10:],
        LimitExceeded,
    )
    gif = encode(gif_pal, "GIF")
    desc = gif.index(b"\x2c", 13 + 3 * 256)  # first image descriptor after the global palette
    maybe(
        "bomb/gif-frame-larger-than-screen",
        gif[: desc + 5] + struct.pack("<HH", 60000, 60000) + gif[desc + 9 :],
        (200, 300),
    )
    many_frames = [Image.new("P", (64, 64), i % 256) for i in range(2000)]
    ok(
        "bomb/gif-2000-frames",
        encode(many_frames[0], "GIF", save_all=True, append_images=many_frames[1:]),
        np.asarray(many_frames[0].convert("RGB")),
        0,
    )
    tiff = encode(cat, "TIFF")
    err("bomb/tiff-header-100000x100000", tiff_set_size(tiff, 100_000, 100_000), LimitExceeded)
    err("bomb/tiff-header-0x0", tiff_set_size(tiff, 0, 0), ImageError)
    zeros = Image.new("L", (4000, 4000))
    ok(
        "bomb/tiff-deflate-4000x4000-within-limit",
        encode(zeros, "TIFF", compression="tiff_adobe_deflate"),
        np.zeros((4000, 4000, 3), np.uint8),
        0,
    )
    err("bomb/jpeg2000-siz-100000x100000", j2k_set_size(j2k, 100_000, 100_000), LimitExceeded)
    err("bomb/jpeg2000-siz-0x0", j2k_set_size(j2k, 0, 0), ImageError)
    err("bomb/jp2-100000x100000", jp2_set_size(encode(cat, "JPEG2000"), 100_000, 100_000), LimitExceeded)
    err("bomb/bmp-header-100000x100000", bmp_set_size(encode(rocket, "BMP"), 100_000, 100_000), LimitExceeded)
    err("bomb/bmp-header-0-width", bmp_set_size(encode(rocket, "BMP"), 0, 300), ImageError)
    err("bomb/webp-canvas-16384x16384", webp_vp8x(16384, 16384), LimitExceeded)
    err("bomb/jpeg-over-max-encoded-bytes", jpeg + b"\x00" * 20_000_000, LimitExceeded)
    ok(
        "bomb/jpeg-4096x4096-flat-within-limit",
        encode(np.zeros((4096, 4096, 3), np.uint8), "JPEG", quality=50),
        np.zeros((4096, 4096, 3), np.uint8),
        1,
    )

    # ---- truncations at many offsets: always an error, never a half-decoded image
    for fmt, data in (
        ("jpeg", jpeg),
        ("jpeg-progressive", prog),
        ("png", encode(rocket, "PNG")),
        ("gif", gif),
        ("webp", encode(coffee, "WEBP", quality=90)),
        ("bmp", encode(rocket, "BMP")),
        ("tiff", tiff),
        ("tiff-lzw", encode(cat, "TIFF", compression="tiff_lzw")),
        ("jpeg2000-j2k", j2k),
        ("jpeg2000-jp2", encode(cat, "JPEG2000")),
    ):
        n = len(data)
        cuts = sorted(
            {c for c in (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64, 100, 128, 256, 512, 1000) if c < n}
            | {int(n * f) for f in (0.1, 0.25, 0.5, 0.75, 0.9, 0.99)}
        )
        for c in cuts:
            err(f"truncated/{fmt}-{c}", data[:c], DecodeError)

    # ---- bit flips in headers and entropy data: decode to something of the right size, or a clean error
    rng = np.random.default_rng(6)
    for fmt, data, shape in (
        ("jpeg", jpeg, (240, 320)),
        ("jpeg-progressive", prog, (240, 320)),
        ("png", encode(rocket, "PNG"), (300, 200)),
        ("gif", gif, (200, 300)),
        ("webp", encode(coffee, "WEBP", quality=90), (200, 300)),
        ("bmp", encode(rocket, "BMP"), (300, 200)),
        ("tiff", tiff, (240, 320)),
        ("jpeg2000", j2k, (240, 320)),
    ):
        head = min(len(data) // 4, 700 if fmt.startswith("jpeg") else 120)
        for k in range(12):
            pos = sorted(int(x) for x in rng.integers(0, head, size=1 + k % 3))
            maybe(f"bitflip-header/{fmt}-{k}", flip_bits(data, pos), shape)
        for k in range(12):
            pos = sorted(int(x) for x in rng.integers(head, len(data) - 2, size=1 + k % 4))
            maybe(f"bitflip-data/{fmt}-{k}", flip_bits(data, pos), shape)
    return items


def tiff_set_size(data: bytes, width: int, height: int) -> bytes:
    """A little-endian TIFF written by Pillow with ImageWidth/ImageLength rewritten."""
    b = bytearray(data)
    ifd = struct.unpack_from("<I", b, 4)[0]
    for i in range(struct.unpack_from("<H", b, ifd)[0]):
        entry = ifd + 2 + 12 * i
        tag, typ = struct.unpack_from("<HH", b, entry)
        if tag in (256, 257):
            value = width if tag == 256 else height
            if typ == 3:
                struct.pack_into("<H", b, entry + 8, value & 0xFFFF)
            else:
                struct.pack_into("<I", b, entry + 8, value)
    return bytes(b)


def j2k_set_size(data: bytes, width: int, height: int, at: int = 0) -> bytes:
    """A JPEG 2000 codestream (starting at byte ``at``) whose SIZ marker announces ``width`` x ``height``."""
    b = bytearray(data)
    struct.pack_into(">IIII", b, at + 8, width, height, 0, 0)  # Xsiz, Ysiz, XOsiz, YOsiz
    return bytes(b)


def jp2_set_size(data: bytes, width: int, height: int) -> bytes:
    """A JP2 file written by Pillow whose ihdr box and codestream both announce ``width`` x ``height``."""
    b = bytearray(data)
    ihdr = b.index(b"ihdr")
    struct.pack_into(">II", b, ihdr + 4, height, width)
    return j2k_set_size(bytes(b), width, height, b.index(b"jp2c") + 4)


def bmp_set_size(data: bytes, width: int, height: int) -> bytes:
    """A BMP (BITMAPINFOHEADER) with its width and height rewritten."""
    return data[:18] + struct.pack("<ii", width, height) + data[26:]


def webp_vp8x(width: int, height: int) -> bytes:
    """An extended WebP whose VP8X canvas is ``width`` x ``height`` and whose image is a 1x1 lossless frame."""
    vp8l = encode(np.zeros((1, 1, 3), np.uint8), "WEBP", lossless=True)[12:]  # the 'VP8L' chunk
    vp8x = (
        b"VP8X"
        + struct.pack("<I", 10)
        + b"\x00\x00\x00\x00"
        + (width - 1).to_bytes(3, "little")
        + (height - 1).to_bytes(3, "little")
    )
    body = b"WEBP" + vp8x + vp8l
    return b"RIFF" + struct.pack("<I", len(body)) + body


def limits_items() -> list[tuple[str, bytes, dict[str, object], type[ImageError]]]:
    """Items that break a non-default limit: (name, data, Limits kwargs, expected error)."""
    p = photos()
    return [
        ("tiff-not-allowed", encode(p["chelsea"], "TIFF"), {"allowed_formats": ("JPEG", "PNG")}, UnsupportedFormat),
        ("gif-not-allowed", encode(p["chelsea"], "GIF"), {"allowed_formats": ("JPEG",)}, UnsupportedFormat),
        ("png-over-pixels", encode(p["chelsea"], "PNG"), {"max_pixels": 10_000}, LimitExceeded),
        ("webp-over-pixels", encode(p["chelsea"], "WEBP"), {"max_pixels": 10_000}, LimitExceeded),
        ("gif-over-pixels", encode(p["chelsea"], "GIF"), {"max_pixels": 10_000}, LimitExceeded),
        ("bmp-over-pixels", encode(p["chelsea"], "BMP"), {"max_pixels": 10_000}, LimitExceeded),
        ("tiff-over-pixels", encode(p["chelsea"], "TIFF"), {"max_pixels": 10_000}, LimitExceeded),
        ("jpeg-over-bytes", encode(p["chelsea"], "JPEG"), {"max_encoded_bytes": 1000}, LimitExceeded),
    ]


def main(argv: list[str] | None = None) -> int:
    """Write the corpus as files (for inspection, or as seeds for an external fuzzer)."""
    parser = argparse.ArgumentParser(description="write the hostile-input corpus to a folder")
    parser.add_argument("out", type=Path)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    items = build()
    for item in items:
        (args.out / (item.name.replace("/", "__") + ".bin")).write_bytes(item.data)
    sys.stdout.write(f"wrote {len(items)} files to {args.out}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
