"""What the page chrome offers a person by their roles: ``{% if user|may_approve %}`` (the
approvals work list is for people who may approve somewhere)."""

from django import template

from ledger.core import roles

register = template.Library()


@register.filter
def may_approve(user) -> bool:
    return roles.workspace_ids(user, roles.APPROVE) != set()
