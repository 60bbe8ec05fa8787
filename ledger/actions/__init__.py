"""The action registry. Each coded action type is a module here that registers one definition; the
HTTP actions configured as rows join it from ``ledger.integrations.configured`` (``ledger.apps``)."""

from ledger.actions import notify, prepare_brief, standin, update_status  # noqa: F401  (register their actions)
from ledger.actions.base import ActionDefinition, FieldError, Limits, UnknownAction, get_action, register, registry

__all__ = ["ActionDefinition", "FieldError", "Limits", "UnknownAction", "get_action", "register", "registry"]
