"""Constraint expressions the models share."""

from django.db.models import Q


def choices_check(field: str, choices) -> Q:
    """A CheckConstraint condition: ``field`` holds one of ``choices``' values."""
    return Q(**{f"{field}__in": [value for value, _ in choices]})
