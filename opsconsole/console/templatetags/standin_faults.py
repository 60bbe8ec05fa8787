"""The line saying the stand-in's next calls fail as scripted, when faults are queued there
(opsconsole.console.standin_faults). ``{% standin_faults %}`` on the dashboard, ``{% standin_faults
operation %}`` on the page of an operation whose calls reach the stand-in."""

from django import template

from ledger.actions import registry
from opsconsole.console import standin_faults as faults

register = template.Library()


@register.inclusion_tag("console/_standin_faults.html")
def standin_faults(operation=None):
    if operation is not None and not faults.calls_the_standin(registry.get(operation.action)):
        return {"queued": None}
    return {"queued": faults.queued()}
