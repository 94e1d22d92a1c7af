"""A classifier's class names: what its ``labels`` parameter names, read once when the model loads.

The value of the ``labels`` parameter (``network.labels`` in ``classify_fused``) is one of:

* ``imagenet``: the 1000 ImageNet-1k names shipped with tritonprep (``tritonprep/data/imagenet_labels.txt``);
* a file of one name per line, in class order (UTF-8), relative to the folder the model reads its files
  from (the model's own folder; ``classify_fused``: the model repository, as ``network.model``), or absolute;
* empty or absent: no names; a class's label is its index (``"285"``).

Nothing here knows a name: the shipped classifier's configs say ``imagenet`` like any other classifier.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path

from ..errors import ConfigError

#: the config parameter that names a classifier's labels
PARAMETER = "labels"
#: the value that names the shipped ImageNet-1k list
IMAGENET = "imagenet"
IMAGENET_CLASSES = 1000


@lru_cache(maxsize=1)
def imagenet_labels() -> tuple[str, ...]:
    """The 1000 ImageNet-1k class names, index-aligned with an ImageNet classifier's logits."""
    text = resources.files("tritonprep").joinpath("data/imagenet_labels.txt").read_text(encoding="utf-8")
    names = names_of(text, "imagenet_labels.txt")
    if len(names) != IMAGENET_CLASSES:
        raise ConfigError(f"imagenet_labels.txt must hold {IMAGENET_CLASSES} names, found {len(names)}")
    return names


def names_of(text: str, source: str) -> tuple[str, ...]:
    """The names of a labels file's text: one per line, surrounding spaces dropped, trailing empty lines ignored;
    :class:`ConfigError` for an empty line among them (it would shift every later class) or no name at all."""
    lines = [line.strip() for line in text.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    if not lines:
        raise ConfigError(f"labels file {source} holds no names; write one class name per line, in class order")
    empty = [n for n, line in enumerate(lines, 1) if not line]
    if empty:
        raise ConfigError(
            f"labels file {source}: line {empty[0]} is empty; give every class a name (one per line, in class "
            "order), or the names after it belong to the wrong classes"
        )
    return tuple(lines)


@dataclass(frozen=True)
class Labels:
    """A classifier's class names, or none (the label of a class is then its index)."""

    #: the names in class order; None: labels are the class indices
    names: tuple[str, ...] | None = None
    #: where they come from, for messages: ``imagenet``, a file's path, or ``class index``
    source: str = "class index"

    def check(self, classes: int) -> None:
        """:class:`ConfigError` unless there is one name per class of a network with ``classes`` outputs."""
        if self.names is not None and len(self.names) != classes:
            raise ConfigError(
                f"labels {self.source} hold {len(self.names)} names but the network has {classes} classes; "
                "give one name per class, in class order"
            )

    def encoded(self, ids: Sequence[int]) -> list[bytes]:
        """The UTF-8 labels of class ``ids`` (what a BYTES output holds)."""
        if self.names is None:
            return [str(int(i)).encode() for i in ids]
        return [self.names[int(i)].encode() for i in ids]


def read_labels(value: str | None, base: Path) -> Labels:
    """The labels a ``labels`` parameter names (see the module's description); a relative file is read from
    ``base``. :class:`ConfigError` naming the file and what to do when it cannot be read."""
    text = (value or "").strip()
    if not text:
        return Labels()
    if text.lower() == IMAGENET:
        return Labels(imagenet_labels(), IMAGENET)
    path = Path(text) if Path(text).is_absolute() else base / text
    try:
        content = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(
            f"labels file {path} does not exist; put one class name per line there, or set {PARAMETER} to "
            f"{IMAGENET!r} or leave it out (labels are then the class indices)"
        ) from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read labels file {path}: {e}; it must be UTF-8 text, one name per line") from None
    return Labels(names_of(content, str(path)), str(path))
