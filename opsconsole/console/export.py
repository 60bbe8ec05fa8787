"""CSV exports of the queue and of the audit search, with the filter (and the
queue's sort) of the page they are linked from, every row it lists rather than one page. Thin like
the other views: membership (``console_page``), the rows narrowed to the person's workspaces, and
``ledger.reads.exports`` writing them (values masked as the operation page masks them), streamed.
"""

from django.http import StreamingHttpResponse
from django.utils import timezone

from ledger.actions import registry
from ledger.models import Control
from ledger.reads import exports
from opsconsole.console.filters import audit_search
from opsconsole.console.tables import queue_listing
from opsconsole.console.views import console_page


def _attachment(rows, name: str) -> StreamingHttpResponse:
    response = StreamingHttpResponse(exports.csv_chunks(rows), content_type="text/csv; charset=utf-8")
    # Dated, like its times, in UTC, and named with that zone: nothing in it reads in another.
    response["Content-Disposition"] = f'attachment; filename="{name}-{timezone.now():%Y-%m-%d}-{exports.ZONE}.csv"'
    return response


@console_page
def queue_csv(request):
    switches = list(Control.objects.filter(paused=True).select_related("workspace").order_by("id"))
    listing = queue_listing(request, switches)
    action = listing.filterset.chosen("action")
    sort = listing.sort
    operations = (
        listing.filterset.qs.select_related("workspace")
        .only(*exports.OPERATION_FIELDS)
        .order_by(*([sort.field, "pk"] if sort.ascending else [f"-{sort.field}", "-pk"]))
    )
    # A payload column for each field of the actions it may list: the header comes before the rows.
    return _attachment(
        exports.operation_rows(operations, user=request.user, actions=[action] if action else sorted(registry)), "queue"
    )


@console_page
def audit_csv(request):
    filterset = audit_search(request.GET, request.user)
    events = filterset.qs.select_related("operation", "workspace").only(*exports.AUDIT_FIELDS)
    return _attachment(exports.audit_rows(events.order_by("-created_at", "-pk")), "audit")
