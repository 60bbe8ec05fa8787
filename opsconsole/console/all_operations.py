"""Every operation, finished ones too: the queue's filters over any state, newest
arrival first, a page at a time along the primary key (ids are given in arrival order). Nothing
counts the list: at a million operations a count alone would outlast the page."""

from django.shortcuts import render

from ledger.core import roles
from ledger.people import assignment
from ledger.people.assignment import TAKERS
from ledger.reads import keyset, replica
from opsconsole.console import tables
from opsconsole.console.views import console_page

PAGE_SIZE = 50


@console_page
def operation_list(request):
    filterset = tables.all_operations_filter(request)
    page = keyset.paginate(
        filterset.qs.select_related("assigned_to").only(*tables.QUEUE_COLUMNS),
        request.GET,
        field="pk",
        size=PAGE_SIZE,
        ascending=filterset.ascending,
    )
    tables.summarise(page.object_list)
    can_take = any(roles.workspace_ids(request.user, capability) != set() for capability in TAKERS)
    return render(
        request,
        "console/operations.html",
        {
            "nav": "operations",
            "filter": filterset,
            "page": page,
            "can_take": can_take,
            # No Take on a finished row, unless a conflict of it waits for a decision.
            "nothing_to_take": assignment.nothing_to_take(page.object_list) if can_take else set(),
            "list_query": tables.list_query(request.GET, "all"),
            "replica_lag": replica.lag_notice(filterset.qs.db),
        },
    )
