"""The documentation holds to the tree (issues 58, 72): the README is a front page of at most 200 lines that keeps the
markers `.ci/run` reads, every page a page links to exists, docs/layout.md names every package and module of glmcheck/
and no name that is not there; every `docs/X.md, "Heading"` that code or a page cites is a heading of X, every path a
page cites exists, docs/ holds the topic pages only, and every run folder under evidence/ is indexed and cited."""

from __future__ import annotations

import functools
import glob
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
    assert (command_after("<!-- test-command -->", text)
            == 'pip install -e ".[test]" && python -m pytest -n 2 --dist loadfile')


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
            assert re.search(rf"^\s*(def|class)\s+{name}\b|^{name}\s*[:=]", sources, re.MULTILINE), \
                f"docs/layout.md, {package or 'glmcheck'}: `{name}` is neither a module nor defined there"


# A heading cited by its page: `docs/X.md, "Heading"`, `[X.md](X.md), "Heading"`, `docs/X.md "Heading"`, possibly
# across a line break of a comment or docstring, and more headings after it (`, "Other"`, ` and "Other"`).
_BREAK = r'(?:\n[ \t]*(?:#|\*|//)?[ \t]*)?'
HEADING_CITATION = re.compile(
    r'(?<![\w-])(?:docs/)?(\w+)\.md`?(?:\]\([^)\s]*\))?(?:,[ \t]*|[ \t]+)' + _BREAK
    + r'"([^"\n]{1,200}(?:\n[^"\n]{1,200})?)"((?:(?:,| and)[ \t]*' + _BREAK + r'"[^"]{1,200}")*)')
QUOTED = re.compile(r'"([^"]{1,200})"')
# A path a page cites: under one of the repository's top folders, or ../ up from the page; `SHA:path` is a git object.
CITED_PATH = re.compile(r"(?<![\w./~:-])((?:\.\./)*(?:evidence|scripts|tests|glmcheck|fixtures|docs|notebooks|\.ci)/"
                        r"[\w./*-]*[\w*])")


def _one_line(text: str) -> str:
    return re.sub(r"\s*\n\s*(?:#|\*|//)?\s*", " ", text).strip()


@functools.cache
def headings(page: Path) -> list[str]:
    return [re.sub(r"^#+\s*", "", line).strip() for line in page.read_text(encoding="utf-8").splitlines()
            if re.match(r"#{1,6} ", line)]


def cited_headings(text: str) -> list[tuple[str, str]]:
    """(page name, heading) for every heading citation in `text`."""
    found = []
    for match in HEADING_CITATION.finditer(text):
        quoted = [match.group(2), *QUOTED.findall(match.group(3))]
        found += [(match.group(1), _one_line(heading)) for heading in quoted]
    return found


def resolves(cited: str, page_headings: list[str]) -> bool:
    """A citation names a heading whole or its opening words ("Gate" for "Gate: the noise band ...")."""
    return any(h == cited or (h.startswith(cited) and not h[len(cited)].isalnum()) for h in page_headings)


def unresolved_headings(files: list[Path]) -> list[str]:
    missing = []
    for path in files:
        for name, heading in cited_headings(path.read_text(encoding="utf-8", errors="replace")):
            page = ROOT / "docs" / f"{name}.md"
            if not page.exists() or not resolves(heading, headings(page)):
                missing.append(f'{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}: '
                               f'docs/{name}.md, "{heading}"')
    return missing


def citing_files() -> list[Path]:
    """The code (glmcheck/, scripts/, tests/, .ci/) and the pages: where a stable heading is cited."""
    code = [p for folder in ("glmcheck", "scripts", "tests", ".ci") for p in (ROOT / folder).rglob("*")
            if p.is_file() and p.suffix in {".py", ".sh", ""} and "__pycache__" not in p.parts
            and p != Path(__file__).resolve()]  # this file's examples are not citations
    return sorted(code) + PAGES


def test_every_cited_heading_exists():
    files = citing_files()
    assert len(files) > 100 and sum(len(cited_headings(p.read_text(encoding="utf-8", errors="replace")))
                                    for p in files) > 100
    assert not unresolved_headings(files)


def test_a_heading_citation_that_resolves_nowhere_is_found(tmp_path):
    page, other = "docs/reliability.md", "performance.md"
    source = tmp_path / "source.py"
    source.write_text(f'# see {page}, "Gate" and "No such heading"; also {page},\n'
                      f'# "Power curves" and [{other}]({other}), "Time to verdict", "Gone too"; {page}, "Gatekeeper"\n')
    assert unresolved_headings([source]) == [f'{source}: docs/reliability.md, "No such heading"',
                                             f'{source}: docs/performance.md, "Gone too"',
                                             f'{source}: docs/reliability.md, "Gatekeeper"']


def missing_paths(page: Path) -> list[str]:
    missing = []
    for cited in CITED_PATH.findall(page.read_text(encoding="utf-8")):
        path = cited.split("::")[0]  # tests/test_x.py::test_name
        target = (page.parent if path.startswith("../") else ROOT) / path
        if not (glob.glob(str(target)) if "*" in path else target.exists()):
            missing.append(cited)
    return missing


def test_every_cited_path_exists():
    missing = {page.relative_to(ROOT).as_posix(): paths for page in PAGES if (paths := missing_paths(page))}
    assert not missing, missing


def test_a_missing_path_is_found(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("`evidence/nowhere/`, `scripts/record_diff.py`, `tests/test_docs.py::test_x`, "
                    "`scripts/gone.py --flag`, `b86e345:docs/gpu-runs/run5/x.txt`, `glmcheck/kernels/*.py`, "
                    "`glmcheck/nothing/*.py`\n")
    assert missing_paths(page) == ["evidence/nowhere", "scripts/gone.py", "glmcheck/nothing/*.py"]


def test_docs_holds_the_topic_pages_only():
    files = [p for p in (ROOT / "docs").rglob("*") if p.is_file()]
    assert files and all(p.parent == ROOT / "docs" and p.suffix == ".md" for p in files), files


def test_every_evidence_folder_is_indexed_cited_and_holds_no_code():
    index = (EVIDENCE / "README.md").read_text(encoding="utf-8")
    pages = "\n".join(p.read_text(encoding="utf-8") for p in PAGES if p.parent != EVIDENCE)
    folders = sorted(p for p in EVIDENCE.iterdir() if p.is_dir())
    assert len(folders) > 20
    for folder in folders:
        assert (folder / "README.md").is_file(), f"{folder.name} has no README"
        assert f"]({folder.name}/)" in index, f"evidence/README.md does not list {folder.name}"
        assert f"evidence/{folder.name}" in pages, f"no page cites evidence/{folder.name}"
    code = [p for p in EVIDENCE.rglob("*") if p.suffix in {".py", ".sh", ".diff", ".patch"}]
    assert not code, f"scripts belong under scripts/, product code in glmcheck/: {code}"
