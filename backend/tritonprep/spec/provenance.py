"""The optional provenance outputs: how each image was decoded and where its pixels went (computed on request)."""

from __future__ import annotations

from dataclasses import dataclass

from ..parameters import markdown_table


@dataclass(frozen=True)
class ProvenanceOutput:
    """An optional per-image output that says how an image was decoded and transformed."""

    data_type: str
    dims: tuple[int, ...]
    help: str


#: the provenance outputs by name; ``_SCALE`` and ``_PADDING`` are suffixes of an image output's name
PROVENANCE: dict[str, ProvenanceOutput] = {
    "ORIGINAL_SIZE": ProvenanceOutput(
        "TYPE_INT32", (2,), "width, height of the decoded image (upright: EXIF orientation applied)"
    ),
    "DECODER": ProvenanceOutput("TYPE_STRING", (1,), "how it was decoded: gpu_hw, gpu_cuda, cpu_fallback or cpu"),
    "_SCALE": ProvenanceOutput(
        "TYPE_FP32", (2,), "x, y: resized / original size; output pixel x maps to original (x - left) / scale_x"
    ),
    "_PADDING": ProvenanceOutput(
        "TYPE_INT32", (4,), "left, top, right, bottom border in output pixels (negative: cropped away)"
    ),
}
PROVENANCE_SUFFIXES = ("_SCALE", "_PADDING")


def provenance_of(name: str) -> tuple[str, str | None]:
    """``(kind, image output)`` of a provenance output name: ``("DECODER", None)``, ``("_SCALE", "PIXELS")``
    for ``PIXELS_SCALE``; ``("", None)`` for a name that is not one."""
    if name in PROVENANCE:
        return name, None
    for suffix in PROVENANCE_SUFFIXES:
        if name.endswith(suffix) and len(name) > len(suffix):
            return suffix, name[: -len(suffix)]
    return "", None


def provenance_table() -> str:
    """The provenance outputs as a Markdown table, as the docs show them."""
    return markdown_table(
        ("output", "data_type, dims", "per image"),
        (
            (f"`{'<OUTPUT>' + n if n.startswith('_') else n}`", f"`{p.data_type}` `{list(p.dims)}`", p.help)
            for n, p in PROVENANCE.items()
        ),
    )
