"""docs/architecture.md's map of the code is true: every path its Layout table lists exists, and every
module of the product is listed (a migration or a management command is covered by its folder's row)."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("opsconsole", "ledger", "reconciliation", "standin")
FOLDER_ROWS = ("migrations", "commands")  # folders whose modules are one row, not one each


def listed_paths() -> list[str]:
    text = (ROOT / "docs" / "architecture.md").read_text()
    layout = text.split("## Layout", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| (?:\*\*)?`([^`]+)`", layout, flags=re.M)


def product_modules() -> set[str]:
    modules = set()
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            relative = path.relative_to(ROOT)
            if path.name == "__init__.py" or set(relative.parts) & set(FOLDER_ROWS):
                continue
            modules.add(relative.as_posix())
    return modules


def test_the_layout_table_lists_some_paths():
    assert len(listed_paths()) > 50


def test_every_path_it_lists_exists():
    missing = [path for path in listed_paths() if not (ROOT / path).exists()]
    assert missing == []


def test_every_module_is_listed():
    assert sorted(product_modules() - set(listed_paths())) == []
