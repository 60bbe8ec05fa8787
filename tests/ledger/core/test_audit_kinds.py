"""AUDIT_KINDS, the list the console's Kind filter offers, is the kinds the code writes: read here
from the code itself, the Python that appends events and the SQL functions that do."""

import ast
import re
from pathlib import Path

from ledger.models.audit import AUDIT_KINDS

CHECKOUT = Path(__file__).resolve().parents[3]
ROOTS = ["ledger", "reconciliation", "opsconsole"]


def python_modules():
    for root in ROOTS:
        for path in sorted((CHECKOUT / root).rglob("*.py")):
            if "migrations" not in path.parts:
                yield path, ast.parse(path.read_text())


def _strings(node) -> list[str]:
    """The kind(s) an expression names: a string, either branch of `a if c else b`."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.IfExp):
        return _strings(node.body) + _strings(node.orelse)
    return []


def _pattern(node) -> str | None:
    """An f-string kind (f"approval_{decision}") as a pattern of the kinds it can make."""
    if not isinstance(node, ast.JoinedStr):
        return None
    return "".join(re.escape(part.value) if isinstance(part, ast.Constant) else "[a-z_]+" for part in node.values)


def _called(node: ast.Call) -> str:
    return node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")


def kinds_in_python() -> tuple[set[str], set[str]]:
    """The kinds written by name, and the patterns of those made from an f-string."""
    constants = {
        target.id: node.value.value
        for _, tree in python_modules()
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
        for target in node.targets
        if isinstance(target, ast.Name) and target.id.isupper()
    }
    kinds, patterns = set(), set()
    for _, tree in python_modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                for keyword in node.keywords:
                    if keyword.arg == "kind":
                        kinds.update(_strings(keyword.value))
                        if isinstance(keyword.value, ast.Name) and keyword.value.id in constants:
                            kinds.add(constants[keyword.value.id])
                        if pattern := _pattern(keyword.value):
                            patterns.add(pattern)
                    if keyword.arg == "noun" and _called(node) == "save_audited":
                        kinds.update(
                            f"{noun}_{change}" for noun in _strings(keyword.value) for change in ("created", "changed")
                        )
                if _called(node) == "_audit":  # the small helpers that name their kind first
                    kinds.update(next((_strings(arg) for arg in node.args if _strings(arg)), []))
            # The tables of kinds by state (`_failure_kind`).
            if isinstance(node, ast.FunctionDef) and node.name.endswith("_kind"):
                for returned in ast.walk(node):
                    if isinstance(returned, ast.Dict):
                        kinds.update(kind for value in returned.values for kind in _strings(value))
    return kinds, patterns


def kinds_in_sql() -> set[str]:
    """The kinds the SQL functions append: `'kind', 'claimed'` or `'kind', CASE ... THEN 'x' ... END`."""
    kinds = set()
    for root in ROOTS:
        for path in (CHECKOUT / root).rglob("*.sql"):
            for expression in re.findall(r"'kind',\s*(CASE\b.*?\bEND|'[a-z_]+')", path.read_text(), re.DOTALL):
                if expression.startswith("CASE"):
                    kinds.update(re.findall(r"(?:THEN|ELSE)\s+'([a-z_]+)'", expression))
                else:
                    kinds.add(expression.strip("'"))
    return kinds


def test_every_kind_the_code_writes_is_listed_and_every_listed_kind_is_written():
    named, patterns = kinds_in_python()
    written = named | kinds_in_sql()
    made_by_patterns = {kind for kind in AUDIT_KINDS for pattern in patterns if re.fullmatch(pattern, kind)}

    assert sorted(written - set(AUDIT_KINDS)) == [], "kinds the code writes that AUDIT_KINDS lacks"
    assert sorted(set(AUDIT_KINDS) - written - made_by_patterns) == [], "listed kinds the code never writes"
    for pattern in patterns:
        assert any(re.fullmatch(pattern, kind) for kind in AUDIT_KINDS), f"no listed kind for f-string {pattern}"
    assert len(AUDIT_KINDS) == len(set(AUDIT_KINDS))


def test_the_scan_finds_kinds_of_every_shape():
    """Control: the scan reads each way the code names a kind, so the test above can fail."""
    named, patterns = kinds_in_python()
    assert {"paused", "resumed"} <= named  # kind="paused" if paused else "resumed"
    assert "lease_expired" in named  # kind=LEASE_EXPIRED
    assert {"source_created", "source_changed"} <= named  # save_audited(noun="source")
    assert "mismatch_acknowledged" in named
    assert "breaker_opened" in named  # _audit(..., "kind", ...)
    assert {"outcome_unknown", "needs_review"} <= named  # _failure_kind's table
    assert r"approval_[a-z_]+" in patterns  # f"approval_{decision}"
    assert {"reserved", "duplicate_delivery", "conflict_detected", "succeeded"} <= kinds_in_sql()
