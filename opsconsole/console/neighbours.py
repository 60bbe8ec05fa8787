"""Previous and next within the list an operation was opened from: the queue's
or all operations' links carry the list's query (``list=queue`` or ``list=all`` and its filters and
sort), and the operation's page finds its neighbours in that list from its own position, two
reads of one row each along the list's index (a keyset step, as paging is): however long the list,
and whether or not the operation is still in it."""

from dataclasses import dataclass

from django.urls import reverse

from ledger.models import Control, Operation
from ledger.reads import keyset
from opsconsole.console import tables

LISTS = {"queue": "console:queue", "all": "console:operations"}


@dataclass
class Neighbours:
    previous: str  # the previous operation's page, with the list's query ("": the list's first)
    next: str  # the next one's ("": the list's last)
    back: str  # the list itself


def around(request, operation: Operation) -> Neighbours | None:
    """The neighbours of ``operation`` in the list its page was opened from; None when it was not
    opened from one (or the list's query is not one the list accepts)."""
    name = request.GET.get("list")
    if name not in LISTS:
        return None
    if name == "queue":
        switches = list(Control.objects.filter(paused=True).select_related("workspace").order_by("id"))
        listing = tables.listing_for(request.GET, request.user, switches)
        queryset, field, ascending = listing.filterset.qs, listing.sort.field, listing.sort.ascending
    else:
        filterset = tables.operations_filter(request.GET, request.user)
        queryset, field, ascending = filterset.qs, "pk", filterset.ascending
    query = tables.list_query(request.GET, name)
    previous = _step(queryset, operation, field, ascending=not ascending)
    following = _step(queryset, operation, field, ascending=ascending)

    def link(pk):
        return f"{reverse('console:operation', args=[pk])}?{query}" if pk else ""

    return Neighbours(previous=link(previous), next=link(following), back=f"{reverse(LISTS[name])}?{query}")


def _step(queryset, operation: Operation, field: str, *, ascending: bool) -> int | None:
    """The id of the row after ``operation`` in ``queryset`` ordered by (field, id), ascending or not."""
    if field == "pk":
        beyond = queryset.filter(pk__gt=operation.pk) if ascending else queryset.filter(pk__lt=operation.pk)
        return beyond.order_by("pk" if ascending else "-pk").values_list("pk", flat=True).first()
    position = keyset.Cursor(getattr(operation, field), operation.pk)
    beyond = queryset.filter((keyset.after if ascending else keyset.before)(field, position))
    order = [field, "pk"] if ascending else [f"-{field}", "-pk"]
    return beyond.order_by(*order).values_list("pk", flat=True).first()
