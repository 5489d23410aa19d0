"""The README and the pages in docs/ link only to files and headings that exist.

A newcomer follows the README's table of contents and the pages' cross links; a
link to a moved section or a renamed page is a dead end nobody notices in review.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support import REPO

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as dashes."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    return {_anchor(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", text, re.M)}


def _links(page: Path) -> list[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    return [m.group(1) for m in LINK.finditer(text) if not m.group(1).startswith(("http://", "https://"))]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_relative_link_resolves(page: Path) -> None:
    dead = []
    for link in _links(page):
        target, _, anchor = link.partition("#")
        path = (page.parent / target).resolve() if target else page
        if not path.exists():
            dead.append(f"{link}: no file {target}")
        elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
            dead.append(f"{link}: no heading #{anchor} in {path.name}")
    assert dead == []


def test_the_readme_is_a_front_door() -> None:
    """The README gets a newcomer to a found culprit; the manual lives in docs/."""
    lines = (REPO / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= 250


def test_every_docs_page_is_linked_from_the_readme() -> None:
    linked = {link.partition("#")[0] for link in _links(REPO / "README.md")}
    pages = {f"docs/{page.name}" for page in PAGES[1:]}
    assert pages - linked == set()
