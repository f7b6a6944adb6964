"""The documentation site builds with mkdocs, warnings (broken links, missing anchors, pages left out of the nav)
as errors, and every relative link in README.md and docs/ reaches a file and, for ``#anchor``, a heading."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest


def test_mkdocs_build_is_strict_and_clean(markdown_docs: Any, tmp_path: Path) -> None:
    config = (markdown_docs.repo / "mkdocs.yml").read_text(encoding="utf-8")
    assert "strict: true" in config
    site = tmp_path / "site"
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=markdown_docs.repo,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "WARNING" not in result.stderr, result.stderr
    for page in markdown_docs.docs.glob("*.md"):
        built = site / "index.html" if page.stem == "index" else site / page.stem / "index.html"
        assert built.is_file(), f"{page.name} was not built"


def test_every_page_is_in_the_nav(markdown_docs: Any) -> None:
    config = (markdown_docs.repo / "mkdocs.yml").read_text(encoding="utf-8")
    missing = [page.name for page in markdown_docs.docs.glob("*.md") if f": {page.name}" not in config]
    assert not missing, f"pages missing from mkdocs.yml's nav: {missing}"


def _broken(markdown_docs: Any, link: Any) -> str | None:
    """Why ``link`` is broken, or None. External links (a scheme or ``//``) are not fetched."""
    parts = urlsplit(link.target)
    if parts.scheme or parts.netloc:
        return None
    source = link.path
    target = (source.parent / unquote(parts.path)).resolve() if parts.path else source
    if not target.exists():
        return f"no file {parts.path}"
    if parts.path and markdown_docs.repo not in target.parents and target != markdown_docs.repo:
        return f"{parts.path} leaves the repository"
    if not parts.fragment:
        return None
    if target.suffix != ".md":
        return f"#{parts.fragment} on a file that is not Markdown"
    # README.md is read on GitHub, docs/ on the site: each link must work where its page is rendered.
    in_readme = source == markdown_docs.repo / "README.md"
    anchors = markdown_docs.github_anchors(target) if in_readme else markdown_docs.mkdocs_anchors(target)
    if parts.fragment not in anchors:
        return f"no heading #{parts.fragment} in {target.name} (has: {sorted(anchors)})"
    return None


def test_relative_links_resolve(markdown_docs: Any) -> None:
    checked = 0
    problems = []
    for path in markdown_docs.files():
        for link in markdown_docs.links(path):
            checked += 1
            why = _broken(markdown_docs, link)
            if why is not None:
                problems.append(f"{path.relative_to(markdown_docs.repo)}:{link.line}: {link.target}: {why}")
    assert checked > 20, "the link scanner found almost no links: is it still reading the files?"
    assert not problems, "broken links:\n" + "\n".join(problems)


@pytest.mark.parametrize(
    ("target", "expected"),
    [("nowhere.md", "no file"), ("fault-plans.md#no-such-heading", "no heading"), ("#profiles", None)],
)
def test_the_link_checker_catches_what_it_should(markdown_docs: Any, target: str, expected: str | None) -> None:
    """The checker itself: a missing file and a missing anchor are reported, a real anchor is not."""

    class FakeLink:
        path = markdown_docs.docs / "fault-plans.md"
        line = 1

    FakeLink.target = target  # type: ignore[attr-defined]
    why = _broken(markdown_docs, FakeLink)
    assert (why is None) if expected is None else (why is not None and why.startswith(expected))
