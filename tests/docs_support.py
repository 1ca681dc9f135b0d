"""Reading README.md and docs/*.md the way tests/test_docs.py checks them (docs/conventions.md).

A page is split into fenced blocks (with their info string, their marker and the headings above
them), marked paragraphs, and ``tileops`` command lines. A marker is an HTML comment on the
line(s) directly above a fence or a paragraph::

    <!-- runnable: exit=0 [output=lines|NAME] [timeout=S] -->   run it; it must exit with that code
    <!-- not-runnable: REASON -->                                 a shell example that is not run, and why
    <!-- file: NAME -->                                          write the block to NAME before the page runs
    <!-- output: NAME -->                                        compare the block with a real run (NAME's check)
    <!-- usage: COMMAND -->                                      a synopsis: exactly COMMAND's flags
    <!-- promql-test: NAME -->                                   a PromQL example evaluated by promtool
"""

from __future__ import annotations

import argparse
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PAGES = (REPO / "README.md", *sorted((REPO / "docs").glob("*.md")))

#: Fence info strings that hold shell commands; each such block carries a runnable or not-runnable marker.
SHELL = ("sh", "bash", "console", "shell")
MARKERS = ("runnable", "not-runnable", "file", "output", "usage", "promql-test")

_FENCE = re.compile(r"^(\s*)```\s*([\w+-]*)\s*$")
_MARKER = re.compile(r"^\s*<!--\s*([a-z-]+):?\s*(.*?)\s*-->\s*$", re.S)
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


@dataclass
class Marker:
    kind: str
    text: str  # everything after "kind:"
    args: dict[str, str] = field(default_factory=dict)  # key=value pairs of the text

    @classmethod
    def parse(cls, kind: str, text: str) -> "Marker":
        args = dict(m.groups() for m in re.finditer(r"(\w+)=(\S+)", text))
        return cls(kind, " ".join(text.split()), args)


@dataclass
class Block:
    page: Path
    line: int  # 1-based line of the opening fence (of the paragraph's first line)
    info: str  # the fence's info string; "" for a paragraph
    body: str  # the fence's content, de-indented
    marker: Marker | None
    headings: tuple[str, ...]  # the heading chain above the block
    fenced: bool = True

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"

    def commands(self) -> list[str]:
        """The shell commands: a console block's ``$`` lines (``\\`` continues one), else the whole body."""
        if self.info != "console":
            return [self.body]
        out: list[str] = []
        lines = self.body.splitlines()
        i = 0
        while i < len(lines):
            if lines[i].startswith("$ "):
                cmd = lines[i][2:]
                while cmd.endswith("\\") and i + 1 < len(lines):
                    i += 1
                    cmd = cmd[:-1] + " " + lines[i].strip()
                out.append(cmd)
            i += 1
        return out

    def shown_output(self) -> list[str]:
        """A console block's output lines: what is not a command."""
        if self.info != "console":
            return []
        out, cont = [], False
        for line in self.body.splitlines():
            if line.startswith("$ ") or cont:
                cont = line.endswith("\\")
                continue
            out.append(line)
        return out


def read_page(page: Path) -> list[Block]:
    """Every fenced block of ``page`` and every marked paragraph, in order."""
    lines = page.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    headings: list[tuple[int, str]] = []
    pending: Marker | None = None
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.lstrip().startswith("<!--"):  # a marker, possibly over several lines
            j = i
            while "-->" not in lines[j]:
                j += 1
            m = _MARKER.match("\n".join(lines[i:j + 1]))
            if m and m.group(1) in MARKERS:
                pending = Marker.parse(m.group(1), m.group(2))
            i = j + 1
            continue
        fence = _FENCE.match(line)
        if fence:
            indent, info = fence.groups()
            j = i + 1
            while j < len(lines) and not re.match(r"^\s*```\s*$", lines[j]):
                j += 1
            body = [x[len(indent):] if x.startswith(indent) else x.lstrip() for x in lines[i + 1:j]]
            blocks.append(Block(page, i + 1, info, "\n".join(body) + "\n", pending, tuple(h for _, h in headings)))
            pending = None
            i = j + 1
            continue
        heading = _HEADING.match(line)
        if heading:
            level = len(heading.group(1))
            headings = [h for h in headings if h[0] < level] + [(level, heading.group(2))]
        elif pending is not None and line.strip():  # a marked paragraph, table or list: up to a blank line
            j = i
            while j < len(lines) and lines[j].strip():
                j += 1
            blocks.append(Block(page, i + 1, "", "\n".join(lines[i:j]) + "\n", pending,
                                tuple(h for _, h in headings), fenced=False))
            pending = None
            i = j
            continue
        i += 1
    return blocks


def all_blocks() -> list[Block]:
    return [b for page in PAGES for b in read_page(page)]


def marked(kind: str) -> list[Block]:
    return [b for b in all_blocks() if b.marker is not None and b.marker.kind == kind]


# --------------------------------------------------------------------------- the command line, as argparse has it


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            return dict(a.choices)
    return {}


def options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """A parser's own flags (``--x``), help and suppressed ones left out."""
    return {s: a for a in parser._actions for s in a.option_strings
            if s.startswith("--") and s != "--help" and a.help is not argparse.SUPPRESS}


def commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> dict[tuple[str, ...], argparse.ArgumentParser]:
    """Every command path (``()`` the root, ``("fleet", "bench")``) and its parser."""
    out = {path: parser}
    for name, sub in subparsers(parser).items():
        out.update(commands(sub, path + (name,)))
    return out


# --------------------------------------------------------------------------- `tileops ...` as the docs write it

_STOP = {"|", "||", ">", ">>", "<", "&&", ";", "2>&1", "&"}


@dataclass
class Invocation:
    where: str
    text: str
    path: tuple[str, ...] = ()  # the command it ends in
    paths: list[tuple[str, ...]] = field(default_factory=list)  # every command it names (fleet's inner one too)
    flags: list[tuple[tuple[str, ...], str, str | None]] = field(default_factory=list)  # (path, flag, value)
    errors: list[str] = field(default_factory=list)


def _tokens(text: str) -> list[str]:
    text = text.replace("\\|", "|")
    try:
        toks = shlex.split(text, comments=True)
    except ValueError:
        toks = text.split()
    return toks


def _clean(tok: str) -> str:
    return tok.strip("[](),`'\":")


def _start(toks: list[str]) -> int | None:
    """Where the ``tileops`` command begins: the first word (after ``VAR=value`` assignments), or the image
    of a ``docker run`` (the image is called tileops, its entrypoint is ``tileops``). None otherwise."""
    i = 0
    while i < len(toks) and re.fullmatch(r"[A-Za-z_]\w*=\S*", toks[i]):
        i += 1
    if toks[i:i + 1] == ["tileops"]:
        return i + 1
    if toks[i:i + 2] == ["docker", "run"] and "tileops" in toks:
        return toks.index("tileops") + 1
    return None


def _read_flag(inv: Invocation, path: tuple[str, ...], parser: argparse.ArgumentParser, toks: list[str],
               i: int) -> int:
    """The flag at ``toks[i]`` (``--name``, ``--name=value``, alternatives ``--a/--b``) noted in ``inv`` with
    its value (the next word where the flag takes one and none is attached); the index after it."""
    word = _clean(toks[i])
    names = [f"--{w.lstrip('-')}" for w in word.split("=", 1)[0].split("/")]
    value = word.split("=", 1)[1] if "=" in word else None
    known = options(parser)
    takes_value = any(known[n].nargs != 0 for n in names if n in known)
    if value is None and takes_value and i + 1 < len(toks) and toks[i + 1] not in _STOP \
            and not _clean(toks[i + 1]).startswith("-"):
        value = _clean(toks[i + 1])
        i += 1
    for name in names:
        _note_flag(inv, path, name, value, known)
    return i + 1


def _note_flag(inv: Invocation, path: tuple[str, ...], name: str, value: str | None,
               known: dict[str, argparse.Action]) -> None:
    """One flag as the docs write it: an error where the command has no such flag, or a value outside its
    choices (a placeholder such as ``<N>`` or ``N`` stands for any)."""
    if name == "--help":
        return
    if name not in known:
        inv.errors.append(f"{' '.join(('tileops',) + path)} has no {name}")
        return
    inv.flags.append((path, name, value))
    choices = known[name].choices
    if value and choices is not None and not value.isupper() and not value.startswith("<"):
        written = set(re.split(r"[|/]", value))
        if not written <= set(choices):
            inv.errors.append(f"{name} takes {sorted(choices)}; the docs write {value}")


def parse_invocation(text: str, where: str, root: argparse.ArgumentParser, *,
                     inline: bool = False) -> Invocation | None:
    """``tileops ...`` in ``text`` walked against the parsers: the command path it names and each flag it
    gives (with the value written after it), and what does not exist. None when ``text`` runs no tileops.
    ``inline``: a code span in prose or a table, where ``|`` separates alternatives, never a pipe."""
    toks = _tokens(text)
    start = _start(toks)
    if start is None:
        return None
    toks = [t for t in toks[start:] if not (inline and t == "|")]
    inv = Invocation(where, text.strip())
    parsers = commands(root)
    path: tuple[str, ...] = ()
    i = 0
    while i < len(toks):
        tok = toks[i]
        if tok in _STOP:
            break
        if tok == "--":  # fleet: what follows goes to the command in each container
            inner = path[-1:] if path[:1] == ("fleet",) else ()
            if inner not in parsers or not inner:
                inv.errors.append(f"`--` after {' '.join(('tileops',) + path)}")
                break
            path = inner
            inv.paths.append(path)
            i += 1
            continue
        word = _clean(tok)
        if word.startswith("--"):
            i = _read_flag(inv, path, parsers[path], toks, i)
            continue
        subs = subparsers(parsers[path])
        alternatives = re.split(r"[|/]", word)
        if subs and word and all(a in subs for a in alternatives):
            inv.paths += [path + (a,) for a in alternatives]
            path = path + (alternatives[0],)  # `calibrate|bench`: alternatives with the same flags
        elif subs and path == () and word and not word.startswith(("<", "-")) and word != "..." \
                and not word.isupper():  # COMMAND: a placeholder
            inv.errors.append(f"tileops has no command {word!r}")
            break
        i += 1  # a subcommand, a positional or a placeholder
    inv.path = path
    inv.paths.append(path)
    return inv


_INLINE = re.compile(r"`(tileops [^`]+)`")


def invocations(root: argparse.ArgumentParser) -> list[Invocation]:
    """Every ``tileops`` command line of README.md and docs/: in shell and text fences (a console block's
    ``$`` lines), and in inline code."""
    out: list[Invocation] = []
    for page in PAGES:
        in_fence, info = False, ""
        for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            fence = _FENCE.match(line)
            if fence and not in_fence:
                in_fence, info = True, fence.group(2)
                continue
            if in_fence and re.match(r"^\s*```\s*$", line):
                in_fence = False
                continue
            where = f"{page.relative_to(REPO)}:{n}"
            if in_fence:
                text = line.strip()
                if info in ("yaml", "json", "python", "promql") or (info == "console" and not text.startswith("$ ")):
                    continue
                inv = parse_invocation(text[2:] if text.startswith("$ ") else text, where, root)
                if inv is not None:
                    out.append(inv)
                continue
            for m in _INLINE.finditer(line):
                inv = parse_invocation(m.group(1), where, root, inline=True)
                if inv is not None:
                    out.append(inv)
    return out


def usage_flags(block: Block) -> dict[str, str | None]:
    """The flags a synopsis block names, with the choices written after each (``table|json``) or None."""
    out: dict[str, str | None] = {}
    toks = _tokens(block.body)
    for i, tok in enumerate(toks):
        word = _clean(tok)
        if word.startswith("--"):
            nxt = _clean(toks[i + 1]) if i + 1 < len(toks) else ""
            out[word] = nxt if "|" in nxt and not nxt.startswith("-") else None
    return out


# --------------------------------------------------------------------------- anchors


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]", "", heading.lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    return {slug(h) for b in [page.read_text(encoding="utf-8")] for h in
            (m.group(2) for m in (_HEADING.match(x) for x in _outside_fences(b)) if m)}


def _outside_fences(text: str) -> list[str]:
    out, inside = [], False
    for line in text.splitlines():
        if re.match(r"^\s*```", line):
            inside = not inside
            continue
        if not inside:
            out.append(line)
    return out


def prose(page: Path) -> str:
    """The page without its fenced blocks."""
    return "\n".join(_outside_fences(page.read_text(encoding="utf-8")))


# --------------------------------------------------------------------------- sections


@dataclass
class Section:
    where: str
    headings: tuple[str, ...]
    text: str  # the section's prose, fences left out


def sections(page: Path) -> list[Section]:
    """The page cut at every heading; each piece with its heading chain and its prose."""
    out: list[Section] = []
    chain: list[tuple[int, str]] = []
    buf: list[str] = []
    start = 1

    def flush(at: int) -> None:
        out.append(Section(f"{page.relative_to(REPO)}:{start}", tuple(h for _, h in chain), "\n".join(buf)))

    inside = False
    for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        if re.match(r"^\s*```", line):
            inside = not inside
            continue
        heading = None if inside else _HEADING.match(line)
        if heading:
            flush(n)
            level = len(heading.group(1))
            chain = [h for h in chain if h[0] < level] + [(level, heading.group(2))]
            buf, start = [line], n
        elif not inside:
            buf.append(line)
    flush(0)
    return out


def flag_tables(root: argparse.ArgumentParser) -> list[tuple[str, tuple[str, ...] | None, list[str]]]:
    """The rows of every flag table (a table whose first header cell is ``flag``): where the row is, the
    command the nearest heading names (``tileops X`` in code; None when none does), and the flags of its
    first cell."""
    out = []
    for page in PAGES:
        for sec in sections(page):
            path = None
            for h in reversed(sec.headings):
                m = re.search(r"`(tileops [^`]+)`", h)
                inv = parse_invocation(m.group(1), sec.where, root, inline=True) if m else None
                if inv is not None:
                    path = inv.path
                    break
            header = None
            for line in sec.text.splitlines():
                if not line.startswith("|"):
                    header = None
                    continue
                first = line.strip("|").split(" | ")[0].strip()
                if header is None:
                    header = first
                elif header == "flag" and not set(line) <= set("|-: "):
                    out.append((sec.where, path, re.findall(r"`(--[a-z][a-z0-9-]*)", first)))
    return out


def table_flags(root: argparse.ArgumentParser, path: tuple[str, ...]) -> dict[tuple[str, ...], set[str]]:
    """The flags a table under ``tileops PATH`` may document: PATH's own and its subcommands' (a table under
    `tileops fleet` documents the flags of `fleet calibrate` and `fleet bench`), by command."""
    return {p: set(options(parser)) for p, parser in commands(root).items() if p[:len(path)] == path}
