"""The console's dashboard: what waits now and what the last 24 hours did, for the workspaces the
person may see, with links to where one acts on it. Reads only (``ledger.reads.dashboard``,
``reconciliation.selectors``); a request from htmx (the page refreshing itself) gets the figures'
fragment alone."""

from datetime import timedelta
from functools import wraps

from django.contrib.auth.views import redirect_to_login
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.utils.cache import patch_vary_headers
from django_htmx.http import HttpResponseClientRedirect

from ledger.core import roles
from ledger.integrations import destination_status as destinations_of
from ledger.reads import dashboard as figures_of
from ledger.reads import replica
from ledger.timed import duration_text
from opsconsole.console import charts
from opsconsole.console.filters import HELD, QueueFilter
from opsconsole.console.views import console_page
from reconciliation import selectors as reconciliation

REFRESH_SECONDS = 15
STALE_SAMPLES = timedelta(minutes=15)  # the sweep samples every 5 minutes: past this it is not running
DUE_WARNING = timedelta(minutes=5)  # due work waiting longer than this for a worker is shown as a warning


def _whole_page_to_log_in(view):
    """A refresh after the session ended: htmx would swap the login page into the dashboard; the
    browser is sent to it instead (HX-Redirect), to come back here."""

    @wraps(view)
    def check(request, *args, **kwargs):
        if request.htmx and not request.user.is_authenticated:
            return HttpResponseClientRedirect(redirect_to_login(request.get_full_path()).url)
        return view(request, *args, **kwargs)

    return check


@_whole_page_to_log_in
@console_page
def dashboard(request):
    figures = figures_of.figures(request.user)
    results = reconciliation.results(request.user)
    hours = [hour.start for hour in figures.hours]
    queue = reverse("console:queue")
    filterable = _queue_states()
    context = {
        "nav": "dashboard",
        "figures": figures,
        "replica_lag": replica.lag_notice(figures.database),
        "results": results,
        "destinations": destinations_of.destinations(now=figures.now),
        "refresh_seconds": REFRESH_SECONDS,
        "scope": _scope(request.user),
        "states": [
            {"count": count, "link": f"{queue}?state={count.state}" if count.state in filterable else ""}
            for count in figures.states
        ],
        "held_link": f"{queue}?state={HELD}",
        "oldest_due": duration_text(timedelta(seconds=figures.oldest_due_seconds))
        if figures.oldest_due_seconds is not None
        else None,
        "due_late": (figures.oldest_due_seconds or 0) > DUE_WARNING.total_seconds(),
        "oldest_held": duration_text(timedelta(seconds=figures.oldest_held_seconds))
        if figures.oldest_held_seconds is not None
        else None,
        "samples_stale": figures.sampled_until is None or figures.now - figures.sampled_until > STALE_SAMPLES,
        "sampled_ago": _sampled_ago(figures),
        "hours_with_ages": [(hour, _hour_age(hour, figures)) for hour in figures.hours],
        "cap": figures_of.COUNT_CAP,
        "peak": max(figures.hours, key=lambda hour: hour.finished),
        "throughput_chart": charts.hourly_bars(
            "throughput-chart",
            hours,
            [hour.finished for hour in figures.hours],
            title="Operations finished per hour, last 24 hours",
            y_label="operations per hour",
            description=f"{figures.finished} operations reached a final state in the last 24 hours.",
        ),
        "backlog_chart": charts.hourly_line(
            "backlog-chart",
            hours,
            [hour.backlog for hour in figures.hours],
            title="Unfinished operations (backlog), last 24 hours",
            y_label="unfinished operations",
            description="The backlog at the sweep's last sample in each hour, and now in the current hour; "
            "no point where none was taken.",
        ),
        "action_chart": charts.rate_bars(
            "action-failures-chart",
            [(rate.name, rate.percent) for rate in figures.by_action],
            title="Failure rate by action, last 24 hours",
            description="Failed attempts as a share of attempts.",
        ),
        "destination_chart": charts.rate_bars(
            "destination-failures-chart",
            [(rate.name, rate.percent) for rate in figures.by_destination],
            title="Failure rate by destination, last 24 hours",
            description="Failed attempts as a share of attempts.",
        ),
    }
    template = "console/_dashboard.html" if request.htmx else "console/dashboard.html"
    response = render(request, template, context)
    patch_vary_headers(response, ["HX-Request"])
    return response


def _sampled_ago(figures) -> str:
    """How old the sweep's samples are ("sampled 4 min ago"); "" when there are none."""
    if figures.sampled_until is None:
        return ""
    return f"sampled {duration_text(max(figures.now - figures.sampled_until, timedelta(0)))} ago"


def _hour_age(hour, figures) -> str:
    """Where an hour's figures come from, for the hours' table: "live", "sampled 4 min ago", or
    "live from 09:57" (sampled before)."""
    if not hour.sampled:
        return "live"
    if not hour.live:
        return _sampled_ago(figures) or "not sampled"
    return f"live from {timezone.localtime(figures.live.counted_from):%H:%M}"


def _queue_states() -> set[str]:
    """The states the queue's state filter offers (a link to any other would be refused)."""
    choices = QueueFilter.base_filters["state"].extra["choices"]
    return {value for value, _ in (choices() if callable(choices) else choices)}


def _scope(user) -> str:
    ids = roles.workspace_ids(user)
    if ids is None:
        return "every workspace"
    slugs = sorted(roles.workspaces(user).values_list("slug", flat=True)) if len(ids) < 6 else []
    return ("workspace " + ", ".join(slugs)) if slugs else f"your {len(ids)} workspaces"
