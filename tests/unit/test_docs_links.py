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


# A code path in backticks: nvdeploy/... or a package folder of it (config/, runner/...), or a file of one.
CODE_PATH = re.compile(r"`((?:nvdeploy/)?[a-z_]+(?:/[a-z_]+)*(?:/|\.py))`")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_code_path_a_page_names_exists(page: Path):
    """The README once named engine.py, record.py and collect*.py, which had moved into folders."""
    missing = []
    for path in CODE_PATH.findall(_fenced_out(page.read_text(encoding="utf-8"))):
        if page.name != "README.md" and not (path.startswith("nvdeploy/") or ("/" in path and path.endswith(".py"))):
            continue  # the guides also name other things in backticks (group_vars/, a planted json.py)
        # as written: from the checkout, or from the package (`config/profiles.py` is nvdeploy/config/profiles.py)
        candidates = [ROOT / path, ROOT / "nvdeploy" / path]
        if not any(c.exists() for c in candidates):
            missing.append(path)
    assert missing == [], f"{page.relative_to(ROOT)} names code that is not there: {missing}"


def test_no_page_says_a_shipped_check_is_not_yet_checked():
    text = (ROOT / "docs" / "nvl72.md").read_text(encoding="utf-8")
    assert "Not yet\nchecked here: nvloom" not in text and "not yet checked: nvloom" not in text.lower()


def test_each_page_starts_with_one_title_and_no_section_above_its_first():
    for page in PAGES:
        headings = [line for line in page.read_text(encoding="utf-8").splitlines() if line.startswith("#")
                    and not line.startswith("#!")]
        headings = [h for h in headings if re.match(r"^#{1,6} ", h)]
        fenced = _fenced_out(page.read_text(encoding="utf-8"))
        first = [line for line in fenced.splitlines() if re.match(r"^#{1,6} ", line)]
        assert first and first[0].startswith("# "), (page.name, first[:2])
        assert not any(h.startswith("# ") for h in first[1:]), (page.name, [h for h in first[1:] if h.startswith("# ")])
        # the level under the title is ##: a ### straight after it skips one (docs/slurm.md's anti-flap section)
        if len(first) > 1:
            assert first[1].startswith("## "), (page.name, first[1])
