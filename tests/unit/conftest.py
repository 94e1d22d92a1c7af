"""Fixtures of the unit tests: docker/compose.yaml as read (``raw_compose``), as `docker compose up` sees it
with every default and an admin key (``compose``), and its NGC server (``triton``)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tests.unit.container_files import COMPOSE, ENV, interpolate


@pytest.fixture(scope="module")
def raw_compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


@pytest.fixture(scope="module")
def compose(raw_compose) -> dict[str, Any]:
    """The compose file with the defaults of every variable and a TRITON_ADMIN_KEY, as `up` sees it."""
    return interpolate(raw_compose, ENV)


@pytest.fixture(scope="module")
def triton(compose) -> dict[str, Any]:
    return compose["services"]["triton"]
