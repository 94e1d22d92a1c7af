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
    "reports": set(),  # the files instances leave for the launcher (tritonprep.reports)
    "cuda": {"errors"},  # CuPy's import and the sticky-CUDA-error guard of every GPU path
    "parameters": {"errors"},  # config.pbtxt parameter tables (spec's and the runtimes')
    # the per-image error contract: the client imports it too, so it imports nothing (standard library only)
    "image_errors": set(),
    # an instance's GPU memory budget and its start-up cache folder: read by every GPU part
    "memory": {"errors"},
    "cache": set(),
    # the network files beside model.onnx (FP16, FP16 channel-last) and the one a config runs
    "network_files": set(),
    "spec": {"errors", "parameters", "memory"},
    "geometry": {"errors", "spec"},
    "decode": {"errors", "spec", "cuda"},
    "kernels": {"cuda"},  # plain values only: no specs, decoders or Triton
    "executors": {"errors", "cuda", "spec", "geometry", "decode", "kernels", "memory", "cache"},
    # kernels: the GPU top-k
    "classifier": {"errors", "cuda", "parameters", "memory", "cache", "kernels", "network_files"},
    "triton": {"errors", "cuda", "image_errors", "reports", "memory", "spec", "geometry", "executors"},
    # memory: the syntax of gpu_memory_mb, which the budget plans with; cache: the server's CUDA driver cache folder
    "launcher": {"errors", "reports", "memory", "cache", "network_files"},
    # the one wiring of the request/response layer to the networks (classify_fused, classifier, embedder)
    "pipeline": {"errors", "image_errors", "spec", "executors", "classifier", "triton", "memory", "cuda", "parameters"},
    # `tritonprep model add`: a network's configs from typed objects; the spec (its preprocessing) and the
    # classifier's names (labels, top-k outputs, ONNX Runtime to read the ONNX file)
    "repository": {"errors", "spec", "classifier", "network_files"},
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
    """pyproject finds the packages under its ``where`` folders (a hand-kept list once left out
    tritonprep.pipeline); setuptools' search there finds every package of the tree but the test kit, which is
    a distribution of its own (testkit/pyproject.toml). The wheel itself is built and checked in test_packaging."""
    from setuptools import find_packages

    text = (ROOT / "pyproject.toml").read_text()
    assert "\npackages = [" not in text, (
        "pyproject lists packages by hand; let [tool.setuptools.packages.find] find them"
    )
    where = re.search(r"\[tool\.setuptools\.packages\.find\]\n(?:#[^\n]*\n)*where = \[(.*?)\]", text).group(1)
    found = {p for folder in re.findall(r'"([\w/]+)"', where) for p in find_packages(str(ROOT / folder))}
    expected = {"tritonprep", *(f"tritonprep.{p.parent.name}" for p in PACKAGE.glob("*/__init__.py"))}
    assert expected | {"tritonprep_client"} <= found and "tritonprep_testkit" not in found
    testkit = (ROOT / "testkit" / "pyproject.toml").read_text()
    assert 'name = "tritonprep-testkit"' in testkit and 'include = ["tritonprep_testkit*"]' in testkit


def test_the_layer_table_in_the_docs_is_this_table():
    """docs/architecture.md shows the same table, part by part (so the page cannot drift from the rule)."""
    rows = {}
    for line in (ROOT / "docs" / "architecture.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and re.fullmatch(r"`\w+`", cells[0]):
            rows[cells[0].strip("`")] = set(re.findall(r"`(\w+)`", cells[2]))
    assert rows == ALLOWED
