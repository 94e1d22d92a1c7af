"""What the docs tests share (tests/unit/test_docs.py, test_docs_reference.py): the pages (README.md and
docs/*.md), and how they are read: fenced blocks, prose lines, inline code, the shell snippets in them
and the commands those name."""

from __future__ import annotations

import dataclasses
import re
import shlex
from collections.abc import Iterator
from pathlib import Path

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
