"""The docs stand alone: no page points outside the repository, every relative link resolves,
and node.md names every key of `rabbitry cluster status --json` (issue 27)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rabbitry.control import STATUS_KEYS

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_no_page_points_outside_the_repository(page: Path) -> None:
    text = page.read_text()
    assert "../shared" not in text
    for target in LINK.findall(text):
        if "://" in target or target.startswith("mailto:"):
            continue
        resolved = (page.parent / target).resolve()
        assert resolved.is_relative_to(ROOT), f"{page.name} links outside the repo: {target}"
        assert resolved.exists(), f"{page.name} links to a missing file: {target}"


def test_node_md_counts_and_names_every_status_json_key() -> None:
    text = (ROOT / "docs" / "node.md").read_text()
    match = re.search(r"`--json` prints exactly (\d+) keys: ([^.]+)\.", text.replace("\n", " "))
    assert match, "node.md must say how many keys --json prints"
    assert int(match.group(1)) == len(STATUS_KEYS)
    for key in STATUS_KEYS:
        assert key in match.group(2)
