"""Model parameters from ``config.pbtxt``: a table row per parameter, the readers of their text, the docs' table.

Triton hands a model's ``parameters`` to the Python backend as strings. Each model that takes some
(the preprocess spec, :mod:`tritonprep.spec`; the network runtimes, :mod:`tritonprep.classifier.runtimes`)
describes them in one table of :class:`Parameter` rows: the name in ``config.pbtxt``, the dataclass
field(s) it sets, how its text is read, its default and what it means. That table is the single source
of names, defaults and help: the dataclass is built from it and the docs are generated from it
(:func:`markdown_table`). A reader only converts text (an integer, a list of numbers, a lower-cased
word); every rule about values (choices, ranges) is checked once, when the frozen dataclass is built.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .errors import ConfigError

#: how a parameter's text is read: ``read(name, text) -> value`` (raises ConfigError naming the parameter)
Reader = Callable[[str, str], Any]


@dataclass(frozen=True)
class Parameter:
    """One ``config.pbtxt`` parameter: which field(s) it sets, how its text is read, its default and help."""

    name: str
    #: the field it sets, or a tuple of fields that a tuple value is spread over (``()``: none, see its table)
    target: str | tuple[str, ...]
    read: Reader
    #: the text a config without the parameter stands for (the dataclass's default, as text)
    default: str
    help: str

    @property
    def targets(self) -> tuple[str, ...]:
        """The field(s) it sets, always as a tuple."""
        return self.target if isinstance(self.target, tuple) else (self.target,)

    def values(self, text: str) -> list[tuple[str, Any]]:
        """``(field, value)`` of each field ``text`` sets."""
        value = self.read(self.name, text)
        if isinstance(self.target, tuple):
            return list(zip(self.target, value))
        return [(self.target, value)]


def read_int(name: str, text: str) -> int:
    """An integer."""
    try:
        return int(text.strip())
    except ValueError:
        raise ConfigError(f"parameter {name!r} must be an integer, got {text!r}") from None


def read_whole(name: str, text: str) -> int:
    """A whole number (0 or more); empty text is 0."""
    value = text.strip() or "0"
    if not value.isdecimal():
        raise ConfigError(f"parameter {name!r} must be a whole number (0 or more), got {text!r}")
    return int(value)


def read_ints(count: int | None = None) -> Reader:
    """Comma-separated integers: exactly ``count`` of them, or any number (empty items skipped) without it."""

    def read(name: str, text: str) -> tuple[int, ...]:
        items = text.split(",") if count else [v for v in text.split(",") if v.strip()]
        values = tuple(read_int(name, v) for v in items)
        if count and len(values) != count:
            raise ConfigError(f"parameter {name!r} must be {count} comma-separated integers, got {text!r}")
        return values

    return read


def read_floats(count: int) -> Reader:
    """``count`` comma-separated numbers; one number stands for all ``count``."""

    def read(name: str, text: str) -> tuple[float, ...]:
        try:
            values = tuple(float(v) for v in text.split(","))
        except ValueError:
            raise ConfigError(f"parameter {name!r} must be {count} comma-separated numbers, got {text!r}") from None
        if len(values) == 1:
            values = values * count
        if len(values) != count:
            raise ConfigError(f"parameter {name!r} must have 1 or {count} values, got {len(values)} ({text!r})")
        return values

    return read


def read_float(name: str, text: str) -> float:
    """A number."""
    return read_floats(1)(name, text)[0]


def read_lower(_name: str, text: str) -> str:
    """A word, lower-cased."""
    return text.strip().lower()


def read_upper(_name: str, text: str) -> str:
    """A word, upper-cased."""
    return text.strip().upper()


def read_bool(name: str, text: str) -> bool:
    """``true`` or ``false`` (any case)."""
    value = text.strip().lower()
    if value not in ("true", "false"):
        raise ConfigError(f"parameter {name!r} must be true or false, got {text!r}")
    return value == "true"


def read_upper_list(_name: str, text: str) -> tuple[str, ...]:
    """Comma-separated words, upper-cased, empty items skipped."""
    return tuple(v.strip().upper() for v in text.split(",") if v.strip())


def read_lower_list(_name: str, text: str) -> tuple[str, ...]:
    """Comma-separated words, lower-cased, empty items skipped."""
    return tuple(v.strip().lower() for v in text.split(",") if v.strip())


def check_choice(name: str, value: str, choices: Sequence[str]) -> None:
    """Raise :class:`ConfigError` unless ``value`` is one of ``choices``."""
    if value not in choices:
        raise ConfigError(f"{name} must be one of {', '.join(choices)}; got {value!r}")


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """A Markdown table (as the docs show the parameter tables)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


#: the config parameters of a network model (classifier, embedder) that make it an MPS client of its own kind
MPS_PARAMETERS = ("mps_active_thread_percentage", "mps_client_priority")


def check_mps_client(sm_share: int, priority: int) -> None:
    """:class:`~tritonprep.errors.ConfigError` unless ``sm_share`` is 0..100 and ``priority`` 0 or 1."""
    if not 0 <= sm_share <= 100:
        raise ConfigError(f"mps_active_thread_percentage must be 1..100 (or 0: no limit), got {sm_share}")
    if priority not in (0, 1):
        raise ConfigError(f"mps_client_priority must be 0 (normal) or 1 (below normal), got {priority}")


def mps_client_parameters(params: Mapping[str, Any]) -> tuple[int, int]:
    """``(sm_share, priority)`` for :func:`tritonprep.cuda.set_mps_client` from a network model's config parameters
    (:data:`MPS_PARAMETERS`; absent: 0, the server's environment decides); a bad value is a :class:`ConfigError`
    naming the parameter (the model's load prefixes the model's name)."""
    share, priority = (read_int(name, str(params.get(name, "")).strip() or "0") for name in MPS_PARAMETERS)
    check_mps_client(share, priority)
    return share, priority
