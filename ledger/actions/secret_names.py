"""Which environment variables a workspace's sources and subscriptions may name. A source's secret (a
subscription's: ``ledger.actions.notify``, which checks the name again at each send) is read from the
processes' environment, which holds much besides: Django's ``SECRET_KEY``, the audit key, other
workspaces' secrets. A workspace's admins configure its sources, so the names they may give are
their workspace's alone: those that start with its prefix, and go on after it.

The prefix is ``OPSCONSOLE_SOURCE_`` + the slug in capitals, each character other than a letter or
a digit written ``_``, + ``_``: workspace ``acme-eu`` names ``OPSCONSOLE_SOURCE_ACME_EU_…``. Two
slugs can spell one prefix (``acme-eu``, ``acme_eu``, ``ACME-EU``) and a prefix can begin another
(``acme``'s begins ``acme-eu``'s), so a name is the workspace's whose prefix is the longest it
starts with, and no workspace's when two share that prefix.

Whether a variable is set is never consulted here: a refusal reads the same either way.
"""

import re

from django.db.models import F, Func, Value
from django.db.models.functions import Upper

from ledger.models import Workspace

PREFIX = "OPSCONSOLE_SOURCE_"
_NOT_ALNUM = "[^A-Za-z0-9]"
# A workspace's slug as its prefix spells it, computed by the database to compare with a name.
_SPELLED = Upper(Func(F("slug"), Value(_NOT_ALNUM), Value("_"), Value("g"), function="regexp_replace"))


def workspace_prefix(slug: str) -> str:
    """The prefix of the variables workspace ``slug``'s sources may name."""
    return f"{PREFIX}{re.sub(_NOT_ALNUM, '_', slug).upper()}_"


def name_problem(workspace: Workspace, name: str) -> str:
    """Why ``workspace``'s sources may not name the variable ``name`` ("" when they may)."""
    prefix = workspace_prefix(workspace.slug)
    if len(name) > len(prefix) and name.startswith(prefix) and not _claimed_elsewhere(workspace, name, prefix):
        return ""
    return (
        f"{name} is not workspace {workspace.slug}'s to name: the variables its sources and subscriptions name "
        f"start with {prefix}"
    )


def _claimed_elsewhere(workspace: Workspace, name: str, prefix: str) -> bool:
    """Whether another workspace's prefix, as long as ``prefix`` or longer, begins ``name``: one
    query, whatever the number of workspaces."""
    rest = name[len(PREFIX) :]
    own = len(prefix) - len(PREFIX) - 1
    spellings = [rest[:end] for end in range(own, len(rest) - 1) if rest[end] == "_"]
    others = Workspace.objects.exclude(pk=workspace.pk).annotate(spelled=_SPELLED)
    return others.filter(spelled__in=spellings).exists()
