"""The tree keeps the shape the docs describe: layers that only import downwards, package docs,
package data that matches files, and paths named in the Makefile, README and docs/ that exist."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "backend" / "tritonprep"

#: what each part of the library may import (besides itself): the architecture, as a table
ALLOWED = {
    "errors": set(),
    # the per-image error contract: the client imports it too, so it imports nothing (standard library only)
    "image_errors": set(),
    # an instance's GPU memory budget and its start-up cache folder: read by every GPU part
    "memory": {"errors"},
    "cache": set(),
    "spec": {"errors", "memory"},
    "geometry": {"errors", "spec"},
    "decode": {"errors", "spec"},
    "kernels": set(),  # plain values only: no specs, decoders or Triton
    "executors": {"errors", "spec", "geometry", "decode", "kernels", "memory", "cache"},
    "classifier": {"errors", "memory", "cache"},
    "triton": {"errors", "image_errors", "spec", "geometry", "executors", "memory"},
    "launcher": {"errors"},
    # the one wiring of the request/response layer to the networks (classify_fused)
    "pipeline": {"errors", "image_errors", "spec", "executors", "classifier", "triton", "memory"},
}


def _part(path: Path) -> str:
    rel = path.relative_to(PACKAGE)
    return rel.parts[0].removesuffix(".py")


def _imports(path: Path) -> set[str]:
    """The parts of tritonprep that ``path`` imports (absolute or relative, lazy imports included)."""
    tree = ast.parse(path.read_text(), str(path))
    package = list(path.relative_to(PACKAGE).parent.parts)  # the module's package, relative to tritonprep
    found = set()
    for node in ast.walk(tree):
        targets: list[list[str]] = []
        if isinstance(node, ast.Import):
            targets = [a.name.split(".") for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            targets = [(node.module or "").split(".")]
        elif isinstance(node, ast.ImportFrom):
            base = ["tritonprep", *package[: len(package) - (node.level - 1)]]
            if node.module:
                targets = [[*base, *node.module.split(".")]]
            else:  # from . import x: x is a module of that package
                targets = [[*base, a.name] for a in node.names]
        for t in targets:
            if t[0] == "tritonprep" and len(t) > 1:
                found.add(t[1])
    return found


#: paths the docs name that commands create (settings and outputs), not part of the tree
GENERATED = {"docker/.env", "docker/perf/classify.csv"}
MODULES = sorted(p for p in PACKAGE.rglob("*.py") if p.parent != PACKAGE or p.name != "__init__.py")


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_each_layer_imports_only_the_layers_below_it(path):
    part = _part(path)
    reached = _imports(path) - {part}
    assert reached <= ALLOWED[part], f"{path.relative_to(ROOT)} ({part}) reaches {sorted(reached - ALLOWED[part])}"


def test_the_table_covers_every_part():
    assert {_part(p) for p in MODULES} == set(ALLOWED)


INITS = sorted(
    p for p in [*ROOT.glob("*/*/__init__.py"), *PACKAGE.glob("*/__init__.py")] if not {".venv", "tests"} & set(p.parts)
)


@pytest.mark.parametrize("init", INITS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_package_says_what_it_owns(init):
    doc = ast.get_docstring(ast.parse(init.read_text()))
    assert doc and len(doc) > 40, f"{init.relative_to(ROOT)} has no docstring saying what the package owns"


def test_package_data_patterns_match_files():
    text = (ROOT / "pyproject.toml").read_text()
    patterns = re.search(r"\[tool\.setuptools\.package-data\]\ntritonprep = \[(.*?)\]", text).group(1)
    for pattern in re.findall(r'"([^"]+)"', patterns):
        assert list(PACKAGE.glob(pattern)), f"package data {pattern!r} matches no file"


def test_paths_named_in_the_makefile_readme_and_docs_exist():
    named = set()
    for doc in [ROOT / "Makefile", ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        named |= set(
            re.findall(r"\b((?:scripts|tests|docker|backend|client|testkit|reports)/[\w./-]*[\w])", doc.read_text())
        )
    missing = sorted(p for p in named if not (ROOT / p).exists() and p not in GENERATED)
    assert not missing, f"named but not in the tree: {missing}"


def test_every_package_is_shipped():
    """A package missing from pyproject's list is missing from every non-editable install."""
    listed = re.search(r"\npackages = \[(.*?)\]", (ROOT / "pyproject.toml").read_text(), re.S).group(1)
    found = {"tritonprep", *(f"tritonprep.{p.parent.name}" for p in PACKAGE.glob("*/__init__.py"))}
    assert found <= set(re.findall(r'"([\w.]+)"', listed))
