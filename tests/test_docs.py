"""The README and the docs as a newcomer reads them: the two quick-start commands are the Makefile's, every link
and image they show is in the repository, and they name nothing a clone does not have."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

PROJECT = Path(__file__).parents[1]
README = PROJECT / "README.md"
PAGES = [README, *sorted((PROJECT / "docs").glob("*.md"))]
# A Markdown link or image: [text](target) or ![alt](target), the target without its title.
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^#+ (.+)$", re.MULTILINE)
# What only the project's authors have: their specification, its seed articles, their issue tracker.
_OUTSIDE = re.compile(r"\.\./shared|SPEC\.md|\bseed (?:article|0\d\d)|\bseeds?/|\bissue \d+|\bissue's\b", re.I)


def _anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _links(page: Path) -> list[str]:
    return [target for target in _LINK.findall(page.read_text()) if not target.startswith(("http://", "https://"))]


def test_the_quick_start_is_the_two_make_targets():
    (block,) = re.findall(r"## Quick start\n\n```sh\n(.*?)```", README.read_text(), re.DOTALL)
    commands = [line.split("#")[0].strip() for line in block.splitlines()]
    assert commands == ["make run", "make test"]
    for command in commands:
        # `make -n` names what the target would do: it exists, and nothing runs.
        planned = subprocess.run([*command.split(), "-n"], cwd=PROJECT, capture_output=True, text=True, timeout=60)
        assert planned.returncode == 0, planned.stderr


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_every_link_and_image_is_in_the_repository(page):
    for target in _links(page):
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        assert linked.is_file(), f"{page.name} links to {target}, which is not in the repository"
        if anchor:
            anchors = {_anchor(heading) for heading in _HEADING.findall(linked.read_text())}
            assert anchor in anchors, f"{page.name} links to {target}: no such heading"


def test_the_readme_shows_the_ui_from_images_kept_in_docs():
    images = [target for target in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", README.read_text())]
    assert len(images) >= 2 and all(image.startswith("docs/images/") for image in images), images


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_the_pages_name_nothing_outside_the_repository(page):
    assert _OUTSIDE.findall(page.read_text()) == []


def test_the_readme_reads_in_five_minutes():
    # About 200 words a minute for technical prose.
    assert len(README.read_text().split()) <= 1_000
