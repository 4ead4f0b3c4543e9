"""The documentation holds to the tree (issue 58): the README is a front page of at most 200 lines that keeps the
markers `.ci/run` reads, every page a page links to exists, and docs/layout.md names every package and module of
glmcheck/ and no name that is not there."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
EVIDENCE = ROOT / "evidence"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md")), EVIDENCE / "README.md"]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")  # [text](target) and [text](target#anchor)
NAMED_PAGE = re.compile(r"(?<![\w/.])(docs/[\w-]+\.md)\b")  # a page named in prose: `docs/reliability.md`
IDENTIFIER = re.compile(r"`([A-Za-z_]\w*)`")
README_LIMIT = 200


def command_after(marker: str, text: str) -> str:
    """The first line after `marker` that is not a code fence (what .ci/run reads)."""
    lines = text.splitlines()
    start = lines.index(marker) + 1
    return next(line for line in lines[start:] if not line.startswith("```"))


def test_the_readme_is_a_front_page_with_both_commands():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= README_LIMIT, len(text.splitlines())
    assert command_after("<!-- main-command -->", text) == "pip install -e . && glmcheck layer0"
    assert command_after("<!-- test-command -->", text) == 'pip install -e ".[test]" && python -m pytest -n 2 --dist loadfile'


def broken_links(page: Path) -> list[str]:
    text = page.read_text(encoding="utf-8")
    missing = []
    for target in LINK.findall(text):
        if "://" in target or target.startswith("mailto:"):
            continue
        if not (page.parent / target).exists():
            missing.append(target)
    missing += [named for named in NAMED_PAGE.findall(text) if not (ROOT / named).exists()]
    return missing


def test_every_linked_page_exists():
    assert {page.name for page in PAGES} >= {"README.md", "kernel.md", "checks.md", "serving.md", "tasks.md",
                                             "models.md", "multigpu.md", "reliability.md", "performance.md",
                                             "history.md", "layout.md"}
    broken = {page.relative_to(ROOT).as_posix(): links for page in PAGES if (links := broken_links(page))}
    assert not broken, broken


def test_a_broken_link_is_found(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("see [there](gone.md), [ok](page.md), [web](https://example.org/x.md) and `docs/nowhere.md`\n")
    assert broken_links(page) == ["gone.md", "docs/nowhere.md"]


def layout_rows() -> dict[str, str]:
    """docs/layout.md's package table: {package path under glmcheck/ ('' for glmcheck itself): its modules cell}."""
    text = (ROOT / "docs" / "layout.md").read_text(encoding="utf-8")
    section = text.split("## `glmcheck/`", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 2 and cells[0].startswith("`"):
            name = cells[0].strip("`")
            rows["" if name == "glmcheck" else name] = cells[1]
    return rows


def test_the_layout_names_every_module_and_nothing_else():
    package_root = ROOT / "glmcheck"
    rows = layout_rows()
    on_disk = {p.parent.relative_to(package_root).as_posix().replace(".", "") for p in package_root.rglob("__init__.py")
               if "__pycache__" not in p.parts}
    assert set(rows) == on_disk, (sorted(set(rows) - on_disk), sorted(on_disk - set(rows)))
    for package, cell in rows.items():
        folder = package_root / package
        modules = {p.stem for p in folder.glob("*.py") if p.stem != "__init__"}
        named = set(IDENTIFIER.findall(cell))
        assert modules <= named, f"docs/layout.md, {package or 'glmcheck'}: not named: {sorted(modules - named)}"
        sources = "\n".join(p.read_text(encoding="utf-8") for p in folder.glob("*.py"))
        for name in named - modules:  # a name that is no module must be something the package defines
            assert re.search(rf"^\s*(def|class)\s+{name}\b|^{name}\s*[:=]", sources, re.M), \
                f"docs/layout.md, {package or 'glmcheck'}: `{name}` is neither a module nor defined there"
