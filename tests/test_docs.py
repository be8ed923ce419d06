"""The README stays a page a newcomer reads to the end, and the docs stay reachable from it.

README.md holds what a user needs first (what it is, the two commands, using it locally and on
Slurm, the everyday commands, where to go next); the depth lives in docs/*.md. These checks keep
that shape: the README's length is capped, every relative link in the README and the docs
resolves to a file (and, where it names one, to a heading of a Markdown file), and every docs page
is linked from the README, so no page is orphaned.
"""
import re

import pytest

from helpers import REPO

README = REPO / "README.md"
DOCS = sorted((REPO / "docs").glob("*.md"))
README_MAX_LINES = 250

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def relative_links(page):
    """The relative targets of a Markdown page's links and images, outside fenced code."""
    text = FENCE.sub("", page.read_text())
    return [target for target in LINK.findall(text) if not re.match(r"[a-z][a-z0-9+.-]*:", target)]


def anchors(page):
    """The anchors GitHub gives a Markdown page's headings (lower case, punctuation dropped, spaces
    as hyphens, a repeated one numbered)."""
    seen, found = {}, set()
    for line in FENCE.sub("", page.read_text()).splitlines():
        heading = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if heading:
            slug = re.sub(r"[^\w\- ]", "", heading.group(1).lower()).replace(" ", "-")
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            found.add(slug if count == 0 else "%s-%d" % (slug, count))
    return found


def test_the_readme_is_at_most_250_lines():
    lines = len(README.read_text().splitlines())
    assert lines <= README_MAX_LINES, (
        "README.md has %d lines, over %d: move the depth into a docs/ page and link it" % (lines, README_MAX_LINES))


@pytest.mark.parametrize("page", [README] + DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(page):
    broken = []
    for target in relative_links(page):
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists():
            broken.append("%s (no file %s)" % (target, resolved))
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append("%s (no heading #%s in %s)" % (target, anchor, resolved.relative_to(REPO)))
    assert not broken, "%s links to what is not there: %s" % (page.relative_to(REPO), "; ".join(broken))


def test_every_docs_page_is_linked_from_the_readme():
    linked = {(README.parent / target.partition("#")[0]).resolve() for target in relative_links(README)}
    orphans = [str(page.relative_to(REPO)) for page in DOCS if page.resolve() not in linked]
    assert DOCS and not orphans, "docs pages the README does not link: %s" % ", ".join(orphans)


def test_the_checks_see_a_broken_link_and_the_anchors_github_makes(tmp_path):
    """The link and anchor readers above, on a page made for them (so a regex that matched
    nothing could not pass the tests above vacuously)."""
    page = tmp_path / "page.md"
    page.write_text("# Trainer ÷ minimal loop\n\n## `orchestrator report`\n\n## Presets\n## Presets\n\n"
                    "[a](other.md#presets) ![b](img.png) [c](https://example.org/x.md)\n\n"
                    "```\n[d](in-code.md)\n```\n")
    assert relative_links(page) == ["other.md#presets", "img.png"]
    assert anchors(page) == {"trainer--minimal-loop", "orchestrator-report", "presets", "presets-1"}
    assert "docs/slurm.md" in relative_links(README)
