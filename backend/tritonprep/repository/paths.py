"""Where the shipped model repository is, and the folder ``tritonprep model add`` writes to by default."""

from __future__ import annotations

from pathlib import Path

from .errors import ModelAddError

_CHECKOUT = Path(__file__).resolve().parents[3]
#: the model repository of a checkout (an editable install: ``make setup``)
CHECKOUT_REPOSITORY = _CHECKOUT / "model_repository"
#: the model repository a wheel carries, read-only in site-packages
PACKAGED_REPOSITORY = Path(__file__).resolve().parents[1] / "model_repository"
#: what ``--repository`` is without the option: ``model_repository`` in the current folder
DEFAULT_REPOSITORY = Path("model_repository")


def shipped_repository() -> Path:
    """The repository a new one starts as a copy of: the checkout's when run from one, else the packaged one
    (the same choice as ``tritonprep serve``'s default)."""
    if (_CHECKOUT / "pyproject.toml").is_file() and CHECKOUT_REPOSITORY.is_dir():
        return CHECKOUT_REPOSITORY
    if PACKAGED_REPOSITORY.is_dir():
        return PACKAGED_REPOSITORY
    raise ModelAddError(
        [
            f"no shipped model repository to start a new one from ({PACKAGED_REPOSITORY} is missing); reinstall "
            "tritonprep, or pass --repository with an existing repository"
        ]
    )


def is_repository(folder: Path) -> bool:
    """Whether ``folder`` holds a tritonprep model repository (its ``preprocess`` model)."""
    return (folder / "preprocess" / "config.pbtxt").is_file()


def is_new(folder: Path) -> bool:
    """Whether ``folder`` is to be made: missing, or an empty folder."""
    return not folder.exists() or (folder.is_dir() and not any(folder.iterdir()))
