"""Looking figures up in a run's rows: the best or exact measurement of a configuration in a server setting, the
one-process references (the classifier alone, DALI's best, the decode ceiling) and the settings measured."""

from __future__ import annotations

from typing import Any

DEFAULT_LABEL = "default"
SIZE = "500x375"
#: the kinds of rows measured through a server (so with a server setting)
SERVED_KINDS = ("triton", "soak", "tune", "fused_tune", "instances", "startstop", "decode_once", "gpus", "latency",
                "gpu_profile", "overload")  # fmt: skip


def setting_of(row: dict[str, Any]) -> str:
    """The server setting a row was measured with (``default`` for rows of runs before settings existed)."""
    return row.get("setting") or DEFAULT_LABEL


def matches(row: dict[str, Any], match: dict[str, Any]) -> bool:
    """Whether ``row`` has every ``match`` value (``setting`` compared by :func:`setting_of`)."""
    return all((setting_of(row) if k == "setting" else row.get(k)) == v for k, v in match.items())


def best(rows: list[dict], **match: Any) -> dict | None:
    """The row with the most images/s among those matching, or None."""
    cands = [r for r in rows if matches(r, match)]
    return max(cands, key=lambda r: r["images_per_s"]) if cands else None


def last(rows: list[dict], **match: Any) -> dict | None:
    """The latest row matching (a point measured again replaces the earlier one), or None."""
    cands = [r for r in rows if matches(r, match)]
    return cands[-1] if cands else None


def triton(setting: str, config: str, n: int, **more: Any) -> dict[str, Any]:
    """The match of a Triton measurement of ``config`` (500x375, gRPC) at ``n`` images/request."""
    return {"kind": "triton", "size": SIZE, "protocol": "grpc", "config": config, "images_per_request": n,
            "setting": setting, **more}  # fmt: skip


def settings_measured(rows: list[dict], kinds: tuple[str, ...] = ("triton",)) -> list[dict[str, str]]:
    """The server settings of the rows of ``kinds`` (by default the main Triton measurements), in the order first
    met: ``{label, mps, budget}``."""
    seen: dict[str, dict[str, str]] = {}
    for r in rows:
        if r.get("kind") in kinds:
            label = setting_of(r)
            if label not in seen:
                seen[label] = {"label": label, "mps": _field(r, label, "mps"), "budget": _field(r, label, "budget")}
    return list(seen.values())


def _field(row: dict[str, Any], label: str, key: str) -> str:
    """``mps``/``budget`` of a row, or parsed from its setting's label (rows of runs before the fields)."""
    if key in row:
        return row[key] or ""
    prefix = "mps " if key == "mps" else "budget "
    return next((p[len(prefix) :] for p in label.split(", ") if p.startswith(prefix)), "")


def classifier_alone(rows: list[dict], batch: int = 64) -> dict | None:
    """The classifier alone in one process (the best ONNX Runtime variant) at ``batch``."""
    return best([r for r in rows if r.get("kind") == "classifier" and r.get("batch") == batch])


def dali_rate(rows: list[dict], summary: dict) -> float:
    """DALI's best in process (the main phase's sweep; else the best DALI row), 0 if not measured."""
    sweep = summary.get("dali_best")
    if sweep:
        return float(sweep["images_per_s"])
    row = best(rows, kind="dali", size=SIZE)
    return float(row["images_per_s"]) if row else 0.0


def ceiling_rate(rows: list[dict], summary: dict) -> float:
    """The decode ceiling (the best 6-decoder row of the grid; else the best ceiling row), 0 if not measured."""
    ceil = summary.get("decode_ceiling_best") or best(rows, kind="decode_ceiling", size=SIZE)
    return float(ceil["images_per_s"]) if ceil else 0.0


def ratio(a: float | None, b: float | None) -> float | None:
    """a / b, None where either is missing or b is 0."""
    return a / b if a is not None and b else None


def rate(row: dict | None) -> float | None:
    """A row's images/s, None without a row."""
    return float(row["images_per_s"]) if row else None


def fmt_x(value: float | None) -> str:
    """``1.23x`` or ``-``."""
    return "-" if value is None else f"{value:.2f}x"


def fmt_rate(row: dict | None) -> str:
    """``12,345 (c=64)`` or ``-``."""
    return "-" if row is None else f"{row['images_per_s']:,.0f} (c={row['concurrency']})"
