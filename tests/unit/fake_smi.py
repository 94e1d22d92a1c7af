"""A fake ``nvidia-smi`` for the unit tests that read it (the leftovers check, the harness's GPU samplers)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def install_fake_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, script: str) -> Path:
    """Put ``script`` first on PATH as ``nvidia-smi``, with ``FAKE_SMI`` naming ``tmp_path`` (where the script's
    canned outputs go); return ``tmp_path``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text(script)
    (bin_dir / "nvidia-smi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SMI", str(tmp_path))
    return tmp_path
