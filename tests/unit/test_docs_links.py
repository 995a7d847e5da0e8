"""The README is the way in: it stays a few screens long, and every guide it and docs/ link to exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# [text](target) and ![alt](target); a target with a scheme (https:) or only an anchor is not a file here.
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
README_MAX_LINES = 250


def _fenced_out(text: str) -> str:
    """The text without its fenced code blocks (a [x](y) in a code sample is not a link)."""
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


def test_the_pages_are_there():
    names = {p.name for p in PAGES}
    assert {"README.md", "checks.md", "inventory.md", "slurm.md", "operations.md", "testing.md"} <= names, names


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_names_a_file_that_exists(page: Path):
    targets = LINK.findall(_fenced_out(page.read_text(encoding="utf-8")))
    missing = [t for t in targets if not re.match(r"^[a-z][a-z0-9+.-]*:|^#", t)
               and not (page.parent / t.split("#", 1)[0]).exists()]
    assert missing == [], f"{page.relative_to(ROOT)} links to files that do not exist: {missing}"


def test_the_readme_fits_on_a_few_screens_and_links_each_guide():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    lines = text.count("\n")
    assert lines <= README_MAX_LINES, (f"README.md has {lines} lines: a guide belongs in docs/, with a line in the "
                                       "README's Documentation table")
    linked = {t.split("#", 1)[0] for t in LINK.findall(text)}
    guides = {f"docs/{p.name}" for p in PAGES if p.parent.name == "docs"}
    assert guides <= linked, f"guides the README does not link: {sorted(guides - linked)}"
