"""The README and docs/ cannot drift from the code (no server needed).

* Every command shown in README.md and docs/*.md, in a fenced shell block or in inline code, names a
  real entry point and only options it accepts: ``tritonprep ...`` (the client's parser, and the
  launcher's for ``serve``), ``python -m X ...`` and ``python path.py ...`` (the parser the module
  builds when run, caught at its ``parse_args``), ``make TARGET`` (a target of the Makefile), and
  ``perf_analyzer ...`` (only flags that scripts/perf_sweep.py or the compose ``perf`` service pass).
* Every long option of ``tritonprep classify``, ``embed`` and ``serve`` is documented (docs/client.md,
  docs/deployment.md).
* Every config parameter the code reads is in docs/configuration.md, with its default, and every
  parameter documented there is read by the code; every parameter of a shipped config is documented;
  the provenance outputs are listed as the spec defines them.
* Every relative link resolves, ``#anchors`` included; every dotted name such as
  ``tritonprep.spec.PARAMETERS`` in inline code imports.
* README.md stays a front page (at most 200 lines) that links every docs/ page, each of which opens
  with its title and a one-line purpose.

One test case per command or link, named by its file and line. To see the checker fail, run
``test_a_planted_wrong_option_is_reported`` (it plants ``--top-kk`` into a README command).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import dataclasses
import functools
import importlib
import importlib.util
import io
import logging
import re
import runpy
import shlex
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from tritonprep.errors import RuntimeUnavailable

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
CONFIGURATION = DOCS / "configuration.md"
PAGES = [README, *sorted(DOCS.glob("*.md"))]
README_MAX_LINES = 200

SHELL_LANGUAGES = {"", "bash", "sh", "shell", "console"}
#: parameters that Triton's Python backend reads itself
PYTHON_BACKEND_PARAMETERS = {"FORCE_CPU_ONLY_INPUT_TENSORS": "yes"}
CONFIG_FOLDERS = (ROOT / "model_repository", ROOT / "scripts" / "bench" / "models")


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


# ----------------------------------------------------------------------------- reading the pages
@dataclasses.dataclass(frozen=True)
class Snippet:
    """A piece of a page: a shell line (continuations joined) or an inline code span, with its place."""

    page: Path
    line: int
    text: str
    inline: bool

    def __str__(self) -> str:
        return f"{rel(self.page)}:{self.line}"


def fenced_blocks(text: str) -> Iterator[tuple[str, int, list[str]]]:
    """``(language, first line number, lines)`` of each fenced code block."""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = re.match(r"^\s*(```|~~~)\s*([\w-]*)", lines[i])
        if not m:
            i += 1
            continue
        fence, language, start = m.group(1), m.group(2).lower(), i + 2
        i += 1
        body = []
        while i < len(lines) and not lines[i].strip().startswith(fence):
            body.append(lines[i])
            i += 1
        i += 1
        yield language, start, body


def prose(text: str) -> list[tuple[int, str]]:
    """``(line number, line)`` of the lines outside fenced blocks."""
    out, inside, fence = [], False, ""
    for n, line in enumerate(text.splitlines(), 1):
        m = re.match(r"^\s*(```|~~~)", line)
        if m and (not inside or line.strip().startswith(fence)):
            inside, fence = not inside, m.group(1)
            continue
        if not inside:
            out.append((n, line))
    return out


def inline_code(line: str) -> list[str]:
    return re.findall(r"(?<!`)`([^`]+)`(?!`)", line)


def snippets(page: Path) -> list[Snippet]:
    """Shell lines of fenced shell blocks and inline code spans of ``page``."""
    text = page.read_text()
    out = []
    for language, start, body in fenced_blocks(text):
        if language not in SHELL_LANGUAGES:
            continue
        joined, first = "", None
        for n, line in enumerate(body, start):
            first = n if first is None else first
            if line.rstrip().endswith("\\"):
                joined += line.rstrip()[:-1] + " "
                continue
            out.append(Snippet(page, first, joined + line, inline=False))
            joined, first = "", None
    for n, line in prose(text):
        out.extend(Snippet(page, n, span, inline=True) for span in inline_code(line))
    return out


# ----------------------------------------------------------------------------- commands
def is_python(word: str) -> bool:
    return re.fullmatch(r"(?:\S*/)?python3?(?:\.\d+)?", word) is not None


def is_tritonprep(word: str) -> bool:
    return re.fullmatch(r"(?:\S*/)?tritonprep", word) is not None


def is_command(words: list[str]) -> bool:
    head = words[0]
    return head in ("make", "perf_analyzer") or is_tritonprep(head) or (is_python(head) and len(words) > 1)


def split_segments(line: str) -> list[list[str]]:
    """The simple commands of a shell line (``&&``, ``||``, ``;``, ``|``, ``&`` separate them), comments
    dropped, leading ``VAR=value`` assignments dropped; ``[]`` when the line is not shell."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    try:
        tokens = list(lexer)
    except ValueError:
        return []
    segments, current = [], []
    for token in tokens:
        if token and set(token) <= set(";&|"):
            segments.append(current)
            current = []
        else:
            current.append(token)
    segments.append(current)
    out = []
    for words in segments:
        while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0]):
            words = words[1:]
        if words:
            out.append(words)
    return out


@dataclasses.dataclass(frozen=True)
class Command:
    where: Snippet
    words: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.where}: {' '.join(self.words)}"


def commands(pages: list[Path]) -> list[Command]:
    out = []
    for page in pages:
        for snippet in snippets(page):
            if snippet.inline and not is_command(snippet.text.split() or ["-"]):
                continue
            out.extend(Command(snippet, tuple(w)) for w in split_segments(snippet.text) if is_command(w))
    return out


class _Captured(Exception):
    def __init__(self, parser: argparse.ArgumentParser) -> None:
        self.parser = parser


@contextlib.contextmanager
def _isolated(argv0: str) -> Iterator[None]:
    """Run a module's code here without letting it touch this process's argv, output or logging."""
    root = logging.getLogger()
    handlers, level, argv = root.handlers[:], root.level, sys.argv[:]
    sys.argv = [argv0]
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            with contextlib.redirect_stderr(io.StringIO()):
                yield
    finally:
        sys.argv = argv
        root.handlers[:], root.level = handlers, level


@functools.cache
def parser_of(target: str) -> argparse.ArgumentParser | None:
    """The parser a ``python -m`` module or a ``python`` script builds, caught when it parses; None if it
    takes no arguments. ``target`` is a module name or a path relative to the repository."""
    original = argparse.ArgumentParser.parse_known_args

    def capture(self: argparse.ArgumentParser, *args: object, **kwargs: object) -> None:
        raise _Captured(self)

    argparse.ArgumentParser.parse_known_args = capture  # type: ignore[method-assign]
    try:
        with _isolated(target):
            if target.endswith(".py"):
                runpy.run_path(str(ROOT / target), run_name="__main__")
            else:
                runpy.run_module(target, run_name="__main__", alter_sys=False)
    except _Captured as c:
        return c.parser
    except SystemExit:
        return None
    finally:
        argparse.ArgumentParser.parse_known_args = original  # type: ignore[method-assign]
    return None


def tritonprep_parsers() -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    from tritonprep.launcher.cli import build_parser as serve_parser
    from tritonprep_client.cli import build_parser

    return build_parser(), serve_parser()


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _takes_value(action: argparse.Action) -> bool:
    return action.nargs != 0


def option_problems(parser: argparse.ArgumentParser, args: list[str]) -> list[str]:
    """What is wrong with ``args`` for ``parser``: unknown options and subcommands, then argparse's own
    complaint (bad choices, values), leaving out what a fragment lacks (required arguments, the value of
    an option named last, as in `tritonprep serve --gpus`)."""
    problems: list[str] = []
    subcommands, positional_seen, i = _subcommands(parser), False, 0
    while i < len(args):
        word = args[i]
        if word == "--":
            break
        if word.startswith("-") and len(word) > 1 and not re.fullmatch(r"-\d[\d.]*", word):
            name = word.split("=", 1)[0]
            action = parser._option_string_actions.get(name)
            if action is None:
                known = sorted(s for s in parser._option_string_actions if s.startswith("--"))
                problems.append(f"{name} is not an option of `{parser.prog}` (it has {', '.join(known)})")
            elif "=" not in word and _takes_value(action):
                i += 1
        elif subcommands and not positional_seen:
            if word not in subcommands:
                return [f"{word!r} is not a subcommand of `{parser.prog}` ({', '.join(subcommands)})"]
            return problems + option_problems(subcommands[word], args[i + 1 :])
        else:
            positional_seen = True
        i += 1
    if problems:
        return problems
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            parser.parse_args(args)
    except SystemExit as e:
        message = (err.getvalue().strip().splitlines() or [""])[-1]
        fragment = "the following arguments are required" in message or (
            args[-1].startswith("-") and re.search(r"expected (at least )?one argument", message)
        )
        if e.code and not fragment:
            problems.append(message)
    return problems


@functools.cache
def make_targets() -> frozenset[str]:
    text = (ROOT / "Makefile").read_text()
    targets = set()
    for line in text.splitlines():
        m = re.match(r"^([\w.$() /-]+?)\s*&?:(?!=)", line)
        if m and not line.startswith("\t"):
            targets.update(t for t in m.group(1).split() if "$" not in t)
    return frozenset(targets)


@functools.cache
def perf_analyzer_flags() -> str:
    """Where perf_analyzer's flags are written: the recipe and the compose perf service."""
    return (ROOT / "scripts" / "perf_sweep.py").read_text() + (ROOT / "docker" / "compose.yaml").read_text()


def command_problems(words: list[str]) -> list[str]:
    """Everything wrong with one command line, as sentences naming the entry point."""
    head, args = words[0], list(words[1:])
    if head == "make":
        wanted = [w for w in args if not w.startswith("-") and "=" not in w]
        return [f"make target {t!r} is not in the Makefile" for t in wanted if t not in make_targets()]
    if head == "perf_analyzer":
        flags = perf_analyzer_flags()
        return [
            f"perf_analyzer flag {w.split('=')[0]} is not one that scripts/perf_sweep.py or the compose perf "
            "service passes"
            for w in args
            if w.startswith("-") and not re.search(rf"[\"\s]{re.escape(w.split('=')[0])}[\"=\s]", flags)
        ]
    if is_tritonprep(head):
        client, serve = tritonprep_parsers()
        if args[:1] == ["serve"]:
            return option_problems(serve, args[1:])
        return option_problems(client, args)
    # python -m MODULE ... | python SCRIPT.py ...
    if args[:1] == ["-m"] and len(args) > 1:
        target, args = args[1], args[2:]
        try:
            found = importlib.util.find_spec(target) is not None
        except ModuleNotFoundError:  # a parent package is missing
            found = False
        if not found:
            return [f"`python -m {target}`: no module {target!r}"]
    elif args and args[0].endswith(".py"):
        target, args = args[0], args[1:]
        if not (ROOT / target).is_file():
            return [f"`python {target}`: no such file"]
    else:
        return []
    parser = parser_of(target)
    if parser is None:
        return [f"`{target}` takes no arguments, but the command passes {args}"] if args else []
    return option_problems(parser, args)


ALL_COMMANDS = commands(PAGES)


@pytest.mark.parametrize("command", ALL_COMMANDS, ids=lambda c: str(c.where))
def test_command_names_a_real_entry_point_and_its_options(command):
    problems = command_problems(list(command.words))
    assert not problems, f"{command}\n  " + "\n  ".join(problems)


def test_the_checker_sees_every_kind_of_command():
    """A checker that extracts nothing would pass everything: each kind must be found in the pages."""
    heads = {"make" if c.words[0] == "make" else c.words[0].rsplit("/", 1)[-1] for c in ALL_COMMANDS}
    assert {"make", "tritonprep", "python", "perf_analyzer"} <= heads, heads
    modules = {c.words[2] for c in ALL_COMMANDS if len(c.words) > 2 and c.words[1] == "-m"}
    assert {"scripts.perf_sweep", "scripts.bench.harness", "tritonprep.spec"} <= modules, modules


def test_a_planted_wrong_option_is_reported(tmp_path):
    """The goal "fails on a planted wrong option": a README command with one option misspelt."""
    line = next(c for c in ALL_COMMANDS if c.where.page == README and "--top-k" in c.words)
    planted = tmp_path / "README.md"
    planted.write_text("```bash\n" + " ".join(line.words).replace("--top-k", "--top-kk") + "\n```\n")
    (found,) = commands([planted])
    problems = command_problems(list(found.words))
    assert problems and "--top-kk is not an option of `tritonprep classify`" in problems[0], problems
    # and every other kind of mistake the checker knows
    assert command_problems(["tritonprep", "clasify", "a.jpg"])
    assert command_problems(["tritonprep", "serve", "--gpu", "0"])
    assert command_problems(["python", "-m", "scripts.perf_sweep", "--image", "x"])
    assert command_problems(["python", "-m", "scripts.no_such_script"])
    assert command_problems(["python", "-m", "scripts.leftovers", "chek"])
    assert command_problems(["python", "-m", "scripts.overload", "--model", "nonsense"])
    assert command_problems(["python", "-m", "tritonprep.spec", "--json"])
    assert command_problems(["make", "tests"])
    assert command_problems(["perf_analyzer", "--no-such-flag"])
    assert not command_problems(["tritonprep", "classify", "a.jpg", "--top-k", "3"])


#: where each command's options are documented
OPTION_PAGES = {
    "tritonprep classify": "client.md",
    "tritonprep embed": "client.md",
    "tritonprep serve": "deployment.md",
}


def cli_options() -> list[tuple[str, str]]:
    """``(command, option)`` for every long option of ``tritonprep``'s subcommands."""
    client, serve = tritonprep_parsers()
    parsers = {f"tritonprep {name}": p for name, p in _subcommands(client).items() if name != "serve"}
    parsers["tritonprep serve"] = serve
    return [
        (command, option)
        for command, parser in parsers.items()
        for option in parser._option_string_actions
        if option.startswith("--") and option != "--help"
    ]


@pytest.mark.parametrize(("command", "option"), cli_options(), ids=lambda v: v)
def test_every_option_of_the_command_line_is_documented(command, option):
    page = DOCS / OPTION_PAGES[command]
    spans = {word for _, line in prose(page.read_text()) for span in inline_code(line) for word in span.split()}
    assert option in spans, f"`{command} {option}` is missing from {rel(page)} (its options table)"


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
    from tritonprep.classifier.runtimes import RUNTIME_PARAMETERS
    from tritonprep.pipeline.fused import DEFAULT_NETWORK, NETWORK_PREFIX
    from tritonprep.spec import PARAMETERS

    runtime = {p.name: p.default or None for p in RUNTIME_PARAMETERS}  # batch_buckets: empty, described in words
    return {
        "Preprocess": {p.name: p.default for p in PARAMETERS},
        "Classifier and embedder": {**runtime, **PYTHON_BACKEND_PARAMETERS},
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
    first_commands = [c for c in ALL_COMMANDS if c.where.page == README][:2]
    assert [" ".join(c.words) for c in first_commands] == ["make demo", "make test"], "the two commands come first"


@pytest.mark.parametrize("page", sorted(DOCS.glob("*.md")), ids=rel)
def test_each_docs_page_opens_with_its_title_and_a_one_line_purpose(page):
    lines = page.read_text().splitlines()
    assert lines[0].startswith("# ") and lines[1] == "" and lines[2] and lines[3] == "", (
        f"{rel(page)}: start with '# Title', a blank line, one line saying what the page is for, a blank line"
    )
