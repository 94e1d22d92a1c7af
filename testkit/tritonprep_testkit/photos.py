"""Real photos (scikit-image's samples; no download) and the JPEG sets made from them.

Where scikit-image is not installed (the GPU machine's isolated venv), the same photos are
read from ``$TRITONPREP_PHOTOS/<name>.png``, written by ``python -m scripts.bench_images
--export-photos --out DIR``.
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np
from PIL import Image

#: the four photos the tests use: a cat, an espresso, an astronaut, a rocket
PHOTO_NAMES = ("chelsea", "coffee", "astronaut", "rocket")
#: the photos benchmark images are cut from
BENCH_PHOTO_NAMES = (*PHOTO_NAMES, "hubble_deep_field", "immunohistochemistry", "retina")
ENV = "TRITONPREP_PHOTOS"
#: benchmark image sizes by name
SIZES = {"500x375": (500, 375), "1280x720": (1280, 720), "1920x1080": (1920, 1080), "3840x2160": (3840, 2160)}


def load_photos(names: tuple[str, ...] = PHOTO_NAMES) -> dict[str, np.ndarray]:
    """The named photos as RGB uint8 arrays."""
    try:
        from skimage import data
    except ImportError:
        folder = os.environ.get(ENV)
        if not folder:
            raise ImportError(f"scikit-image is not installed and ${ENV} is not set (see {__name__})") from None
        return {n: np.asarray(Image.open(Path(folder) / f"{n}.png").convert("RGB")) for n in names}
    return {n: np.ascontiguousarray(np.asarray(getattr(data, n)())[..., :3]) for n in names}


def export_photos(folder: Path) -> None:
    """Write the benchmark photos as PNGs, for machines without scikit-image (see :data:`ENV`)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, arr in load_photos(BENCH_PHOTO_NAMES).items():
        Image.fromarray(arr).save(folder / f"{name}.png")


def encode(arr: np.ndarray | Image.Image, fmt: str = "JPEG", **kw: object) -> bytes:
    """Encode an array or Pillow image with Pillow."""
    im = arr if isinstance(arr, Image.Image) else Image.fromarray(arr)
    buf = io.BytesIO()
    im.save(buf, format=fmt, **kw)
    return buf.getvalue()


def make_jpegs(width: int, height: int, count: int, seed: int = 0, quality: int = 90) -> list[bytes]:
    """``count`` distinct JPEGs of ``width`` x ``height`` cut from real photos.

    Each is a random crop with the target aspect ratio, resized with Lanczos, randomly mirrored
    and saved with 4:2:0 chroma subsampling (what cameras and ImageNet use).
    """
    rng = np.random.default_rng(seed)
    sources = [Image.fromarray(a) for a in load_photos(BENCH_PHOTO_NAMES).values()]
    target = width / height
    out = []
    for i in range(count):
        src = sources[i % len(sources)]
        w, h = src.size
        cw, ch = (w, int(w / target)) if w / h < target else (int(h * target), h)
        scale = rng.uniform(0.7, 1.0)
        cw, ch = max(16, int(cw * scale)), max(16, int(ch * scale))
        x0, y0 = int(rng.integers(0, w - cw + 1)), int(rng.integers(0, h - ch + 1))
        im = src.crop((x0, y0, x0 + cw, y0 + ch)).resize((width, height), Image.Resampling.LANCZOS)
        if rng.random() < 0.5:
            im = im.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        out.append(encode(im, "JPEG", quality=quality, subsampling="4:2:0"))
    return out


def photo_variants(count: int, photos: dict[str, np.ndarray] | None = None) -> dict[str, bytes]:
    """``count`` distinct JPEGs of the test photos (:data:`PHOTO_NAMES`), each photo in turn at a quality from 95
    down, named ``<photo>-q<quality>.jpg``: a folder's worth of real images whose classes are known."""
    photos = photos if photos is not None else load_photos()
    names = list(photos)
    out: dict[str, bytes] = {}
    for i in range(count):
        name, quality = names[i % len(names)], 95 - i // len(names)
        out[f"{name}-q{quality}.jpg"] = encode(photos[name], "JPEG", quality=max(quality, 5))
    return out


def write_photo_folder(folder: Path, count: int, photos: dict[str, np.ndarray] | None = None) -> Path:
    """Write :func:`photo_variants` into ``folder`` (a client's folder of images) and return it."""
    for name, data in photo_variants(count, photos).items():
        (folder / name).write_bytes(data)
    return folder
