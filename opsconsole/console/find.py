"""The console's "Find" box (in the top bar of every page): one text, looked up as every id an
operation is known by (``ledger.reads.finding``), within the person's workspaces. One operation found:
its page. Several: a short list saying which id matched. None: what was looked in."""

from django.contrib import messages
from django.shortcuts import redirect, render

from ledger.reads import finding
from opsconsole.console.views import console_page


@console_page
def find(request):
    text = request.GET.get("q", "")
    try:
        found = finding.find_operations(text, user=request.user)
    except finding.FindError as exc:
        messages.error(request, str(exc))
        return render(
            request,
            "console/find.html",
            {
                "nav": "find",
                "found": None,
                "fields": finding.FIELDS.values(),
                "find_query": text[: finding.MAX_QUERY_LENGTH],
            },
            status=400,
        )
    if len(found.matches) == 1 and not found.more:
        match = found.matches[0]
        messages.info(request, f"Found {match.operation.key} by its {' and '.join(match.fields)}.")
        return redirect("console:operation", pk=match.operation.pk)
    return render(
        request, "console/find.html", {"nav": "find", "found": found, "find_query": found.query, "limit": finding.LIMIT}
    )
