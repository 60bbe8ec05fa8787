"""django-q2 tasks of reconciliation: thin and safe to run twice (a verdict needs `unknown`)."""

from dataclasses import asdict

from reconciliation.reconcile import reconcile_unknown_operations


def reconcile() -> dict:
    return asdict(reconcile_unknown_operations())
