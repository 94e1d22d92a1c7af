"""The commands of README.md and docs/ cannot drift from the code (no server needed).

* Every command shown in README.md and docs/*.md, in a fenced shell block or in inline code, names a
  real entry point and only options it accepts: ``tritonprep ...`` (the client's parser, and the
  launcher's for ``serve``), ``python -m X ...`` and ``python path.py ...`` (the parser the module
  builds when run, caught at its ``parse_args``), ``make TARGET`` (a target of the Makefile), and
  ``perf_analyzer ...`` (only flags that scripts/perf_sweep.py or the compose ``perf`` service pass).
* Every long option of ``tritonprep classify``, ``embed`` and ``serve`` is documented (docs/client.md,
  docs/deployment.md).

One test case per command, named by its file and line. To see the checker fail, run
``test_a_planted_wrong_option_is_reported`` (it plants ``--top-kk`` into a README command). The
configuration reference, the links and the front page: tests/unit/test_docs_reference.py.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib
import importlib.util
import io
import logging
import re
import runpy
import sys
import warnings
from collections.abc import Iterator

import pytest

from tests.unit.docs_pages import (
    DOCS,
    PAGES,
    README,
    ROOT,
    commands,
    inline_code,
    is_tritonprep,
    prose,
    rel,
)


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


def model_parser() -> argparse.ArgumentParser:
    """The parser of ``tritonprep model`` (the command hands everything after ``model`` to it)."""
    from tritonprep.repository.cli import build_parser

    return build_parser()


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
        if args[:1] == ["model"]:
            return option_problems(model_parser(), args[1:])
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
    assert command_problems(["tritonprep", "model", "add", "x", "--onnx", "m.onnx", "--labels-file", "l.txt"])
    assert command_problems(["tritonprep", "model", "remove", "x"])
    assert not command_problems(["tritonprep", "classify", "a.jpg", "--top-k", "3"])
    assert not command_problems(["tritonprep", "model", "add", "x", "--onnx", "m.onnx", "--set", "layout=NHWC"])


def test_the_guide_adds_a_classifier_and_an_embedder():
    """docs/your-network.md shows `tritonprep model add` for both kinds, with preprocessing, labels and top-k."""
    guide = [c.words for c in ALL_COMMANDS if c.where.page.name == "your-network.md"]
    adds = [words for words in guide if words[1:3] == ("model", "add")]
    kinds = {w[w.index("--kind") + 1] if "--kind" in w else "classifier" for w in adds}
    assert kinds == {"classifier", "embedder"}, adds
    used = {word for words in adds for word in words if word.startswith("--")}
    assert {"--onnx", "--labels", "--top-k", "--set", "--repository", "--kind"} <= used, used


#: where each command's options are documented
OPTION_PAGES = {
    "tritonprep classify": "client.md",
    "tritonprep embed": "client.md",
    "tritonprep serve": "deployment.md",
    "tritonprep model add": "your-network.md",
}


def cli_options() -> list[tuple[str, str]]:
    """``(command, option)`` for every long option of ``tritonprep``'s subcommands."""
    client, serve = tritonprep_parsers()
    parsers = {f"tritonprep {name}": p for name, p in _subcommands(client).items() if name not in ("serve", "model")}
    parsers["tritonprep serve"] = serve
    parsers.update((f"tritonprep model {name}", p) for name, p in _subcommands(model_parser()).items())
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
