"""The action registry. Each action type is a module here that registers one definition."""

from ledger.actions import configured, prepare_brief, standin, update_status  # noqa: F401  (register their actions)
from ledger.actions.base import ActionDefinition, FieldError, Limits, UnknownAction, get_action, register, registry

__all__ = ["ActionDefinition", "FieldError", "Limits", "UnknownAction", "get_action", "register", "registry"]
