"""The reference pages cannot drift from the code (no server needed).

* Every config parameter the code reads is in docs/configuration.md, with its default, and every
  parameter documented there is read by the code; every parameter of a shipped config is documented;
  the provenance outputs are listed as the spec defines them.
* Every relative link resolves, ``#anchors`` included; every dotted name such as
  ``tritonprep.spec.PARAMETERS`` in inline code imports.
* README.md stays a front page (at most 200 lines) that links every docs/ page, each of which opens
  with its title and a one-line purpose.

One test case per link or name, named by its file and line.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import importlib.util
import re
from pathlib import Path

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from tests.unit.docs_pages import (
    CONFIG_FOLDERS,
    CONFIGURATION,
    DOCS,
    PAGES,
    PYTHON_BACKEND_PARAMETERS,
    README,
    README_MAX_LINES,
    ROOT,
    commands,
    inline_code,
    prose,
    rel,
)
from tritonprep.errors import RuntimeUnavailable


# ----------------------------------------------------------------------------- configuration reference
@dataclasses.dataclass(frozen=True)
class Row:
    section: str
    name: str
    cells: dict[str, str]
    line: int


def documented_parameters() -> list[Row]:
    """The rows of docs/configuration.md's tables whose first column is ``parameter``, with their section."""
    rows, section, header = [], "", None
    for n, line in enumerate(CONFIGURATION.read_text().splitlines(), 1):
        if line.startswith("## "):
            section, header = line[3:].strip(), None
        if not line.startswith("|"):
            header = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header is None:
            header = cells
        elif not set("".join(cells)) <= set("-: ") and header[0] == "parameter":
            name = re.sub(r"^`|`$", "", cells[0])
            rows.append(Row(section, name, dict(zip(header, cells)), n))
    return rows


def first_code(cell: str) -> str:
    """The first `code` of a table cell (its value), or the cell."""
    m = re.search(r"`([^`]*)`", cell)
    return m.group(1) if m else cell


def code_parameters() -> dict[str, dict[str, str | None]]:
    """``{section of docs/configuration.md: {parameter: default or None}}`` from the code."""
    from tritonprep.classifier import labels
    from tritonprep.classifier.runtimes import RUNTIME_PARAMETERS
    from tritonprep.parameters import MPS_PARAMETERS
    from tritonprep.pipeline.fused import DEFAULT_NETWORK, NETWORK_PREFIX
    from tritonprep.spec import PARAMETERS
    from tritonprep.triton import turns

    runtime = {p.name: p.default or None for p in RUNTIME_PARAMETERS}  # batch_buckets: empty, described in words
    return {
        "Preprocess": {p.name: p.default for p in PARAMETERS},
        "Classifier and embedder": {
            **runtime,
            **PYTHON_BACKEND_PARAMETERS,
            turns.PARAMETER: turns.DEFAULT,
            labels.PARAMETER: None,  # none: the class index, described in words
            **dict.fromkeys(MPS_PARAMETERS, "0"),  # read by the network models before their CUDA context
        },
        "classify_fused": {NETWORK_PREFIX + "model": DEFAULT_NETWORK},
        "Benchmark models": read_by_model_files(),
    }


#: a parameter read from a config: ``parameters(config).get("x")``, ``params["x"]``, ``params.get("x")``
READ_PARAMETER = re.compile(r"(?:\bparams|parameters\((?:[^()]|\([^()]*\))*\))\s*(?:\.get\(|\[)\s*\"([\w.]+)\"")


def read_by_model_files() -> dict[str, None]:
    """Parameters that the benchmark models' model.py files read straight from their config."""
    found: dict[str, None] = {}
    for path in sorted((ROOT / "scripts" / "bench" / "models").rglob("model.py")):
        found.update(dict.fromkeys(READ_PARAMETER.findall(path.read_text())))
    return found


def test_every_parameter_read_anywhere_is_documented():
    """Beside the tables the sections are checked against: a parameter that library code or a model.py reads
    from a config by name."""
    sources = [*sorted((ROOT / "backend").rglob("*.py")), *sorted((ROOT / "model_repository").rglob("model.py"))]
    documented = {r.name for r in documented_parameters()}
    missing = sorted(
        f"{rel(path)} reads parameter {name!r}, which {rel(CONFIGURATION)} does not document"
        for path in sources
        for name in READ_PARAMETER.findall(path.read_text())
        if name not in documented
    )
    assert not missing, "\n".join(missing)


def test_every_parameter_the_code_reads_is_documented_with_its_default():
    rows = {(r.section, r.name): r for r in documented_parameters()}
    problems = []
    for section, params in code_parameters().items():
        for name, default in params.items():
            row = rows.get((section, name))
            if row is None:
                problems.append(f"parameter {name!r} is missing from {rel(CONFIGURATION)}, section {section!r}")
            elif default is not None and first_code(row.cells.get("default", "")) != default:
                problems.append(
                    f"{rel(CONFIGURATION)}:{row.line}: {name!r} shows default {row.cells.get('default')}, "
                    f"the code's is {default!r}"
                )
    assert not problems, "\n".join(problems)


def test_every_documented_parameter_is_read_by_the_code():
    code = code_parameters()
    unknown = [
        f"{rel(CONFIGURATION)}:{r.line}: {r.name!r} in section {r.section!r} is read by no code"
        for r in documented_parameters()
        if r.name not in code.get(r.section, {})
    ]
    assert not unknown, "\n".join(unknown)


def shipped_configs() -> list[Path]:
    return sorted({p.resolve() for folder in CONFIG_FOLDERS for p in folder.rglob("*.pbtxt")})


@pytest.mark.parametrize("config", shipped_configs(), ids=rel)
def test_every_parameter_of_a_shipped_config_is_documented(config):
    parsed = text_format.Parse(config.read_text(), model_config_pb2.ModelConfig())
    outputs = {o.name for o in parsed.output}
    documented = {r.name for r in documented_parameters()}
    missing = []
    for key in parsed.parameters:
        prefix, _, base = key.rpartition(".")
        name = base if prefix in outputs else key  # <OUTPUT>.<parameter> overrides one image output
        if name.startswith("network.") and name != "network.model":
            name = name.removeprefix("network.")
        if name not in documented:
            missing.append(name)
    assert not missing, f"{rel(config)} sets {missing}, which {rel(CONFIGURATION)} does not document"


def test_the_provenance_outputs_are_documented_as_the_spec_defines_them():
    from tritonprep.spec import PROVENANCE

    table = {}
    for line in CONFIGURATION.read_text().splitlines():
        m = re.match(r"^\| `([^`]+)` \| (`TYPE_\w+` `\[[\d, ]*\]`) \|", line)
        if m:
            table[m.group(1)] = m.group(2)
    for name, output in PROVENANCE.items():
        shown = "<OUTPUT>" + name if name.startswith("_") else name
        want = f"`{output.data_type}` `{list(output.dims)}`"
        assert table.get(shown) == want, f"{rel(CONFIGURATION)}: provenance output {shown} should read {want}"
    assert len(table) == len(PROVENANCE), f"{rel(CONFIGURATION)} lists provenance outputs the spec lacks: {table}"


# ----------------------------------------------------------------------------- links and names
def heading_anchors(page: Path) -> set[str]:
    """GitHub's anchors of ``page``'s headings."""
    anchors, seen = set(), {}
    for _, line in prose(page.read_text()):
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        slug = re.sub(r"[^\w\- ]", "", m.group(1).lower().replace("`", "")).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def links(page: Path) -> list[tuple[int, str]]:
    out = []
    for n, line in prose(page.read_text()):
        line = re.sub(r"`[^`]*`", "", line)
        out.extend((n, target) for target in re.findall(r"\]\(([^)\s]+)\)", line))
    return out


ALL_LINKS = [(page, n, target) for page in PAGES for n, target in links(page) if not re.match(r"\w+:", target)]


@pytest.mark.parametrize(("page", "line", "target"), ALL_LINKS, ids=[f"{rel(p)}:{n}" for p, n, _ in ALL_LINKS])
def test_relative_link_resolves(page, line, target):
    path, _, anchor = target.partition("#")
    resolved = (page.parent / path).resolve() if path else page
    assert resolved.exists(), f"{rel(page)}:{line}: link {target!r}: {path} does not exist"
    if anchor:
        assert resolved.suffix == ".md", f"{rel(page)}:{line}: link {target!r}: an anchor into a non-Markdown file"
        anchors = heading_anchors(resolved)
        assert anchor in anchors, f"{rel(page)}:{line}: link {target!r}: no heading #{anchor} (has {sorted(anchors)})"


def dotted_names() -> list[tuple[Path, int, str]]:
    pattern = re.compile(r"(?:tritonprep|tritonprep_client|tritonprep_testkit|scripts)(?:\.\w+)+")
    return [
        (page, n, span)
        for page in PAGES
        for n, line in prose(page.read_text())
        for span in inline_code(line)
        if pattern.fullmatch(span)
    ]


ALL_NAMES = dotted_names()


def top_level_names(source: str) -> set[str]:
    """Names a module defines at its top level, read without importing it."""
    names = set()
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


@pytest.mark.parametrize(("page", "line", "name"), ALL_NAMES, ids=[f"{rel(p)}:{n}:{s}" for p, n, s in ALL_NAMES])
def test_dotted_name_resolves(page, line, name):
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        module = ".".join(parts[:cut])
        try:
            spec = importlib.util.find_spec(module)
        except ModuleNotFoundError:
            spec = None
        if spec is None:
            continue
        rest = parts[cut:]
        try:
            obj = importlib.import_module(module)
        except (ImportError, RuntimeUnavailable):  # a module that needs the GPU extra (CuPy): read its source instead
            if rest:
                defined = top_level_names(Path(spec.origin).read_text())
                assert rest[0] in defined, f"{rel(page)}:{line}: `{name}`: {module} defines no {rest[0]!r}"
            return
        for attr in rest:
            assert hasattr(obj, attr), f"{rel(page)}:{line}: `{name}`: {obj.__name__} has no {attr!r}"
            obj = getattr(obj, attr)
        return
    pytest.fail(f"{rel(page)}:{line}: `{name}`: no such module")


# ----------------------------------------------------------------------------- the front page
def test_readme_is_a_front_page_that_links_every_docs_page():
    lines = README.read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; the front page keeps <= 200"
    linked = {(README.parent / t.partition("#")[0]).resolve() for _, t in links(README)}
    unlinked = [rel(p) for p in sorted(DOCS.glob("*.md")) if p.resolve() not in linked]
    assert not unlinked, f"README.md links no {unlinked}"
    first_commands = commands([README])[:2]
    assert [" ".join(c.words) for c in first_commands] == ["make demo", "make test"], "the two commands come first"


@pytest.mark.parametrize("page", sorted(DOCS.glob("*.md")), ids=rel)
def test_each_docs_page_opens_with_its_title_and_a_one_line_purpose(page):
    lines = page.read_text().splitlines()
    assert lines[0].startswith("# ") and lines[1] == "" and lines[2] and lines[3] == "", (
        f"{rel(page)}: start with '# Title', a blank line, one line saying what the page is for, a blank line"
    )
