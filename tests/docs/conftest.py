"""Reading the project's Markdown for the docs tests: fenced blocks, links, headings and their anchors.

The Python blocks of the user guide and the shell blocks of every page become parametrized cases here
(``pytest_generate_tests``), so each block is its own test named by file and line. A block preceded by
``<!-- no-test: reason -->`` is reported as skipped with that reason instead of run.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
USER_GUIDE = DOCS / "user-guide.md"
SHELL_LANGS = frozenset({"bash", "sh", "shell", "console"})

_FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
_NO_TEST = re.compile(r"^\s*<!--\s*no-test:\s*(?P<reason>.*?)\s*-->\s*$")
_HEADING = re.compile(r"^#{1,6}\s+(?P<text>.*?)(?:\s+#+)?\s*$")
_INLINE_CODE = re.compile(r"(`+)(?:.+?)\1")
_LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(\s*<?(?P<target>[^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_RUNS_CLI = re.compile(r"(?m)(?:^|&&|;|\|)\s*(?:\$\s+)?(?:\S*/)?sandbox-emulator(?=\s|$)")
_REF_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(?P<target>\S+?)>?(?:\s+.*)?$")


@dataclass(frozen=True)
class Block:
    """One fenced code block: where it starts (1-based line of the fence), its language and text."""

    path: Path
    line: int
    lang: str
    code: str
    no_test: str | None

    @property
    def label(self) -> str:
        return f"{self.path.relative_to(REPO).as_posix()}:{self.line}"


@dataclass(frozen=True)
class Link:
    """One Markdown link target as written, and the line it is on."""

    path: Path
    line: int
    target: str


def markdown_files() -> list[Path]:
    """README.md and every page under docs/."""
    return [REPO / "README.md", *sorted(DOCS.glob("*.md"))]


def split_fences(text: str) -> Iterator[tuple[int, str, Block | None]]:
    """Yield ``(line number, line, None)`` for prose lines and ``(line, fence line, block)`` once per fenced block."""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        match = _FENCE.match(lines[i])
        if match is None:
            yield i + 1, lines[i], None
            i += 1
            continue
        fence = match["fence"]
        indent = len(match["indent"])
        lang = match["info"].strip().split(" ")[0].lower() if match["info"].strip() else ""
        reason = None
        for previous in reversed(lines[:i]):
            if previous.strip():
                comment = _NO_TEST.match(previous)
                reason = comment["reason"] if comment else None
                break
        body: list[str] = []
        j = i + 1
        while j < len(lines):
            closing = lines[j].strip()
            if closing.startswith(fence[0] * len(fence)) and not closing.strip(fence[0]):
                break
            body.append(lines[j][indent:] if not lines[j][:indent].strip() else lines[j].lstrip())
            j += 1
        yield i + 1, lines[i], Block(Path(), i + 1, lang, "\n".join(body) + "\n", reason)
        i = j + 1


def blocks(path: Path) -> list[Block]:
    """The fenced code blocks of one Markdown file."""
    found = []
    for _, _, block in split_fences(path.read_text(encoding="utf-8")):
        if block is not None:
            found.append(Block(path, block.line, block.lang, block.code, block.no_test))
    return found


def links(path: Path) -> list[Link]:
    """Every link and image target outside code (fenced blocks and inline code spans)."""
    found = []
    for number, line, block in split_fences(path.read_text(encoding="utf-8")):
        if block is not None:
            continue
        prose = _INLINE_CODE.sub("", line)
        found.extend(Link(path, number, m["target"]) for m in _LINK.finditer(prose))
        ref = _REF_DEF.match(prose)
        if ref:
            found.append(Link(path, number, ref["target"]))
    return found


def heading_texts(path: Path) -> list[str]:
    """The plain text of each ATX heading (outside fences), inline markup removed."""
    texts = []
    for _, line, block in split_fences(path.read_text(encoding="utf-8")):
        match = _HEADING.match(line) if block is None else None
        if match:
            text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", match["text"])  # a link keeps its text
            texts.append(re.sub(r"[`*]|(?<!\w)_|_(?!\w)", "", text))
    return texts


def _dedupe(slugs: list[str], sep: str) -> set[str]:
    seen: dict[str, int] = {}
    result = set()
    for slug in slugs:
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        result.add(slug if count == 0 else f"{slug}{sep}{count}")
    return result


def mkdocs_anchors(path: Path) -> set[str]:
    """Heading ids as mkdocs (Python-Markdown's toc) makes them: the site's anchors."""
    slugs = []
    for text in heading_texts(path):
        value = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
        value = re.sub(r"[^\w\s-]", "", value).strip().lower()
        slugs.append(re.sub(r"[-\s]+", "-", value))
    return _dedupe(slugs, "_")


def github_anchors(path: Path) -> set[str]:
    """Heading ids as GitHub renders them: where the README (read on GitHub) points."""
    slugs = [re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-") for text in heading_texts(path)]
    return _dedupe(slugs, "-")


def _params(selected: list[Block]) -> list[object]:
    return [
        pytest.param(block, id=block.label, marks=[pytest.mark.skip(reason=f"no-test: {block.no_test}")])
        if block.no_test is not None
        else pytest.param(block, id=block.label)
        for block in selected
    ]


def user_guide_python_blocks() -> list[Block]:
    return [block for block in blocks(USER_GUIDE) if block.lang in ("python", "py")]


def shell_blocks() -> list[Block]:
    """Shell blocks of README.md and docs/ that run ``sandbox-emulator``."""
    return [
        block
        for path in markdown_files()
        for block in blocks(path)
        if block.lang in SHELL_LANGS and _RUNS_CLI.search(block.code)
    ]


class MarkdownDocs:
    """What the tests read from the Markdown, handed to them as the ``markdown_docs`` fixture (test modules cannot
    import this conftest)."""

    repo = REPO
    docs = DOCS
    user_guide = USER_GUIDE
    files = staticmethod(markdown_files)
    blocks = staticmethod(blocks)
    links = staticmethod(links)
    mkdocs_anchors = staticmethod(mkdocs_anchors)
    github_anchors = staticmethod(github_anchors)
    user_guide_python_blocks = staticmethod(user_guide_python_blocks)


@pytest.fixture(scope="session")
def markdown_docs() -> type[MarkdownDocs]:
    return MarkdownDocs


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "python_block" in metafunc.fixturenames:
        metafunc.parametrize("python_block", _params(user_guide_python_blocks()))
    if "shell_block" in metafunc.fixturenames:
        metafunc.parametrize("shell_block", _params(shell_blocks()))
