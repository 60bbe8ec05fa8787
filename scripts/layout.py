"""Writes the Layout table of docs/architecture.md from the product's own docstrings (`make layout`).

One row per module of the product, saying what its docstring says first; one bold row per folder, from
its ``__init__.py`` (or, for an app that is a namespace package, its ``apps.py``); a folder of
migrations or of management commands is one row, from its ``__init__.py``. A row's words are the
docstring's first sentence, cut at its first colon when it runs past the first line (a docstring opens
with what the module is, then a colon and the detail). The table sits between two markers in the page,
and tests/test_architecture_map.py fails when the page's table is not what this would write.

``python scripts/layout.py`` rewrites the page; ``--check`` only says whether it would change it.
"""

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "architecture.md"
PACKAGES = ("opsconsole", "ledger", "reconciliation", "standin")
ONE_ROW_FOLDERS = ("migrations", "commands")  # folders whose modules are one row, not one each
BEGIN = "<!-- layout: written by `make layout` (scripts/layout.py) from the docstrings; edit them, not this table -->"
END = "<!-- end of layout -->"
HEADER = "| where | what it holds |\n| --- | --- |"
SENTENCE_END = re.compile(r"(?<!\be\.g)(?<!\bi\.e)[.!?](?=\s|$)")  # not "e.g." or "i.e."
COLON = re.compile(r":(?=\s|$)")


class MissingDocstring(Exception):
    """A module or folder the table must describe says nothing of itself."""


def summary(path: Path) -> str:
    """What ``path``'s docstring says first, on one line, ready for a table cell."""
    docstring = ast.get_docstring(ast.parse(path.read_text()))
    if not docstring:
        raise MissingDocstring(f"{path.relative_to(ROOT)} has no docstring: its first line is its row in the Layout")
    first_line = docstring.splitlines()[0]
    sentence = " ".join(docstring.split("\n\n", 1)[0].split())
    if sentence_end := SENTENCE_END.search(sentence):
        sentence = sentence[: sentence_end.start()]
    if len(sentence) > len(first_line) and (colon := COLON.search(sentence)):
        sentence = sentence[: colon.start()]
    return sentence.replace("|", "\\|")


def folder_docstring(folder: Path) -> Path:
    init = folder / "__init__.py"
    return init if init.exists() or not (folder / "apps.py").exists() else folder / "apps.py"


def row(path: Path, source: Path, *, bold: bool = False) -> str:
    where = f"`{path.relative_to(ROOT).as_posix()}{'/' if path.is_dir() else ''}`"
    return f"| {f'**{where}**' if bold else where} | {summary(source)} |"


def folder_rows(folder: Path) -> list[str]:
    """The folder's rows: its own (if it holds modules), its modules', then its subfolders' in turn."""
    if folder.name in ONE_ROW_FOLDERS:
        return [row(folder, folder / "__init__.py")]
    modules = sorted(path for path in folder.glob("*.py") if path.name != "__init__.py")
    rows = [row(folder, folder_docstring(folder), bold=True)] if modules else []
    rows += [row(module, module) for module in modules]
    for subfolder in sorted(path for path in folder.iterdir() if path.is_dir()):
        if any(subfolder.rglob("*.py")):
            rows += folder_rows(subfolder)
    return rows


def table() -> str:
    rows = [HEADER]
    for package in PACKAGES:
        rows += folder_rows(ROOT / package)
    return "\n".join(rows)


def page_with_table(page: str) -> str:
    """``page`` with the text between the markers replaced by the table as it should be."""
    before, found, rest = page.partition(BEGIN)
    _, found_end, after = rest.partition(END)
    if not (found and found_end):
        raise ValueError(f"{PAGE.relative_to(ROOT)}: expected the markers {BEGIN!r} and {END!r}")
    return f"{before}{BEGIN}\n{table()}\n{END}{after}"


def main(argv: list[str]) -> int:
    page = PAGE.read_text()
    try:
        written = page_with_table(page)
    except (MissingDocstring, ValueError) as problem:
        print(problem, file=sys.stderr)
        return 1
    if "--check" in argv:
        if written != page:
            print(f"{PAGE.relative_to(ROOT)}: the Layout table is out of date; run `make layout`", file=sys.stderr)
        return int(written != page)
    if written != page:
        PAGE.write_text(written)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
