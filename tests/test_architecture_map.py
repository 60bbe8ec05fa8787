"""docs/architecture.md's map of the code is the code's: its Layout table is what ``make layout``
(scripts/layout.py) writes from the modules' docstrings, so every module of the product has a row that
says what its docstring says, and a module without a docstring fails here.

And the repository speaks for itself: no doc, comment or test points to a ticket by its number
instead of saying what it refers to."""

import os
import re
from pathlib import Path

from scripts import layout

ROOT = Path(__file__).resolve().parent.parent
ISSUE_NUMBER = re.compile(r"\bissues?\s+#?\d+", re.IGNORECASE)  # across a line break too
# Where an issue number may not come back: the product, its tests, its docs and its tooling; not what
# others wrote (installed packages) nor what runs leave behind.
NOT_OURS = {".git", ".venv", "node_modules", "var", "__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache"}
TEXT = {".py", ".md", ".html", ".css", ".js", ".mjs", ".cjs", ".sql", ".yaml", ".yml", ".toml", ".txt", ".json", ""}


def test_every_module_and_folder_of_the_product_has_a_docstring():
    missing = []
    for package in layout.PACKAGES:
        try:
            layout.folder_rows(ROOT / package)
        except layout.MissingDocstring as problem:
            missing.append(str(problem))
    assert missing == []


def test_the_layout_table_is_what_make_layout_writes():
    page = layout.PAGE.read_text()
    assert page == layout.page_with_table(page), "docs/architecture.md's Layout table is out of date: run `make layout`"


def test_every_module_has_a_row():
    table = layout.PAGE.read_text().split(layout.BEGIN, 1)[1].split(layout.END, 1)[0]
    listed = set(re.findall(r"^\| (?:\*\*)?`([^`]+)`", table, flags=re.M))
    modules = {
        path.relative_to(ROOT).as_posix()
        for package in layout.PACKAGES
        for path in (ROOT / package).rglob("*.py")
        if path.name != "__init__.py" and not set(path.relative_to(ROOT).parts) & set(layout.ONE_ROW_FOLDERS)
    }
    assert sorted(modules - listed) == []


def test_the_rows_beside_the_product_name_paths_that_exist():
    beside = layout.PAGE.read_text().split(layout.END, 1)[1].split("\n## ", 1)[0]
    paths = re.findall(r"^\| \*\*`([^`]+)`", beside, flags=re.M)
    assert len(paths) > 5
    assert [path for path in paths if not (ROOT / path).exists()] == []


def our_text_files() -> list[Path]:
    files = []
    for folder, subfolders, names in os.walk(ROOT):
        subfolders[:] = sorted(name for name in subfolders if name not in NOT_OURS)
        files += [Path(folder, name) for name in sorted(names) if name not in NOT_OURS and Path(name).suffix in TEXT]
    return files


def test_no_issue_numbers_in_the_repository():
    """A ticket's number means nothing to a reader of the code: say what it is about instead."""
    found = []
    for path in our_text_files():
        text = path.read_text(errors="replace")
        for match in ISSUE_NUMBER.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            found.append(f"{path.relative_to(ROOT)}:{line}: {match.group()!r}")
    assert found == []
