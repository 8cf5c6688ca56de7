"""The fenced code blocks of a Markdown file, and how tests/test_docs.py reads the shell ones.

A block's info string is its language (``python``, ``console``, ``json``, ``text``...) followed by
optional ``name=value`` attributes (``python file=test_refund.py``); renderers use the first word.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # 1-based line of the block's first code line
    lang: str  # "" when the fence has no info string
    attrs: dict[str, str]
    text: str

    @property
    def where(self) -> str:
        return f"{self.path.name}:{self.line}"


def blocks(path: Path) -> list[Block]:
    """Every fenced code block of ``path``, in order. An unclosed fence runs to the end (as in
    CommonMark), so a forgotten closing fence cannot hide the rest of a file from the tests."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if opening is None or ("`" in opening["fence"] and "`" in opening["info"]):
            i += 1
            continue
        fence, indent = opening["fence"], len(opening["indent"])
        words = opening["info"].split()
        lang = words[0].lower() if words else ""
        attrs = dict(w.split("=", 1) for w in words[1:] if "=" in w)
        body: list[str] = []
        j = i + 1
        while j < len(lines):
            closing = _FENCE.match(lines[j])
            if closing and closing["fence"].startswith(fence) and not closing["info"].strip():
                break  # a closing fence: the same character, at least as long, no info string
            text = lines[j]
            body.append(text[min(indent, len(text) - len(text.lstrip(" "))) :])  # the fence's indent, at most
            j += 1
        found.append(Block(path, i + 2, lang, attrs, "\n".join(body) + "\n"))
        i = j + 1
    return found


@dataclass
class Command:
    """One shell command of a block, with the output the doc shows for it (console blocks)."""

    line: str
    output: list[str] = field(default_factory=list)

    @property
    def words(self) -> list[str]:
        return shlex.split(self.line, comments=True)

    @property
    def env(self) -> dict[str, str]:
        """The ``NAME=value`` assignments in front of the program."""
        assigned: dict[str, str] = {}
        for word in self.words:
            if not _ASSIGNMENT.match(word):
                break
            name, value = word.split("=", 1)
            assigned[name] = value
        return assigned

    @property
    def argv(self) -> list[str]:
        """The program and its arguments, without the assignments in front."""
        return self.words[len(self.env) :]


def commands(block: Block) -> list[Command]:
    """The commands of a shell block. In a ``console`` block a command is a line that starts with
    ``$ `` and the lines up to the next one are its output; in ``bash``/``sh`` every line that is not
    blank or a comment is a command. A trailing backslash continues a command on the next line."""
    found: list[Command] = []
    pending = ""
    for raw in block.text.splitlines():
        if block.lang == "console" and not pending and not raw.startswith("$ "):
            if not found:
                raise AssertionError(f"{block.where}: a console block starts with a `$ ` command, not {raw!r}")
            found[-1].output.append(raw.rstrip())
            continue
        line = raw[2:] if block.lang == "console" and not pending else raw
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1]
            continue
        found.append(Command((pending + line).strip()))
        pending = ""
    if pending:
        raise AssertionError(f"{block.where}: the last command ends in a backslash")
    return found


def output_matches(shown: list[str], actual: str) -> bool:
    """Whether ``actual`` is the output ``shown``: line by line, trailing spaces ignored, where
    ``...`` inside a line stands for any text and a line of only ``...`` for any number of lines."""
    pattern = ""
    for line in shown:
        if line.strip() == "...":
            pattern += r"(?:[^\n]*\n)*?"
        else:
            pattern += r"[^\n]*".join(re.escape(part) for part in line.rstrip().split("...")) + r"\n"
    text = "".join(line.rstrip() + "\n" for line in actual.splitlines())
    return re.fullmatch(pattern, text) is not None
