"""The one error of ``tritonprep model add``: what is wrong, one line per problem, and nothing was written."""

from __future__ import annotations

from collections.abc import Iterable

from ..errors import ConfigError


class ModelAddError(ConfigError):
    """A network was not added: each of :attr:`problems` is one line saying what is wrong and what to do."""

    def __init__(self, problems: Iterable[str]) -> None:
        self.problems = tuple(problems)
        super().__init__("; ".join(self.problems))
