"""The README and the manuals under docs/: every link resolves inside the repository."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _anchors(text: str) -> set[str]:
    """GitHub's heading anchors: lowercase, punctuation dropped, spaces to hyphens."""
    headings = re.findall(r"^#+ (.+)$", text, flags=re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_links_stay_in_the_repository_and_resolve(document: Path) -> None:
    for link in LINK.findall(document.read_text()):
        assert "://" not in link, f"{link} leaves the repository"
        assert not link.startswith("mailto:"), link
        path, _, anchor = link.partition("#")
        target = (document.parent / path).resolve() if path else document
        assert target.is_relative_to(ROOT), f"{link} leaves the repository"
        assert target.exists(), f"{link}: no such file"
        if anchor:
            assert anchor in _anchors(target.read_text()), f"{link}: no such heading"


def test_the_manuals_exist_and_the_readme_stays_short() -> None:
    names = {p.name for p in DOCUMENTS}
    manuals = {"architecture", "operations", "security", "protocol", "sdk", "storage", "testing"}
    assert {f"{name}.md" for name in manuals} <= names
    assert len((ROOT / "README.md").read_text().splitlines()) <= 300
