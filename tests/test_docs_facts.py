"""The docs agree with the repository and the code: every command in scripts/ is cited by a docs
page (and named in docs/layout.md), and every script anything cites exists.

scripts/ holds only commands a page cites for what they make or measure; a one-off measurement
whose numbers no page shows any more leaves the tree (its page then names the commit that held it)."""

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
LAYOUT = DOCS / "layout.md"
TEXT = {".py", ".sh", ".md", ".yaml", ".yml", ".json", ".toml"}
# A script in the tree; one removed is cited as `git show COMMIT:scripts/NAME`, which is not matched.
SCRIPT = re.compile(r"(?<![0-9a-f]:)scripts/([\w.-]+\.(?:py|sh))\b")


def _pages() -> list[Path]:
    """The pages a reader reads: README.md, docs/*.md, tests/README.md."""
    return [REPO / "README.md", *sorted(DOCS.glob("*.md")), REPO / "tests" / "README.md"]


def _citing() -> list[Path]:
    """Every text file that may name a script: the pages, the package, the tests, the scripts."""
    files = [p for folder in ("bench", "tests", "scripts") for p in sorted((REPO / folder).rglob("*"))]
    return [*_pages(), *(p for p in files if p.is_file() and p.suffix in TEXT)]


def scripts() -> list[str]:
    return sorted(p.name for p in (REPO / "scripts").iterdir() if p.is_file())


def test_every_script_is_cited_by_a_page_and_named_in_the_layout():
    assert scripts(), "no scripts/ folder found: the test would pass on nothing"
    cited = {m.group(1) for page in _pages() if page != LAYOUT for m in SCRIPT.finditer(page.read_text())}
    layout = LAYOUT.read_text()
    uncited = [name for name in scripts() if name not in cited]
    unnamed = [name for name in scripts() if not re.search(rf"(?<![\w.-]){re.escape(name)}", layout)]
    assert not uncited, f"scripts no page cites (cite each where its output is used, or remove it): {uncited}"
    assert not unnamed, f"scripts docs/layout.md does not name: {unnamed}"


def test_every_script_cited_exists():
    present = set(scripts())
    missing = sorted(
        f"{path.relative_to(REPO)}: scripts/{m.group(1)}"
        for path in _citing()
        for m in SCRIPT.finditer(path.read_text(errors="replace"))
        if m.group(1) not in present
    )
    assert not missing, "\n".join(missing)
