"""django-filter sets for the queue and the audit list."""

from dataclasses import dataclass
from datetime import date, datetime, time, timedelta

import django_filters
from django import forms
from django.core.validators import MaxValueValidator, MinValueValidator
from django.utils import timezone

from ledger.core import roles
from ledger.models import AuditEvent, Operation, Workspace
from ledger.models.audit import AUDIT_KIND_GROUPS
from ledger.reads import replica, work_lists
from ledger.reads.failure_groups import Criterion
from ledger.reads.work_lists import DUE, HELD, key_or_request_id
from ledger.states import ATTENTION_STATES, LABELS, State
from opsconsole.console.forms import action_choices

# How an operation last failed (``Operation.last_error_category``), as people read it.
ERROR_CATEGORIES = [
    ("permanent", "Permanent (the destination refused)"),
    ("transient", "Transient (tries used up)"),
    ("ambiguous", "Ambiguous (may have acted)"),
    ("unknown", "Destination cannot tell"),
    ("deadline", "Deadline passed"),
    ("approval", "Approval expired"),
    ("missing", "Missing at the destination"),
]
ASSIGNED_CHOICES = [("mine", "Assigned to me"), ("nobody", "Not taken"), ("anyone", "Taken by anyone")]
AGE_CHOICES = [("1h", "Older than 1 hour"), ("24h", "Older than 24 hours"), ("7d", "Older than 7 days")]


def destination_choices() -> list[tuple[str, str]]:
    """Every destination the external actions call, by the name people read (not an internal
    action's, not an address)."""
    labels = work_lists.destination_labels()
    return [("", "All destinations")] + sorted(labels.items(), key=lambda choice: choice[1])


class WorkFilters(django_filters.FilterSet):
    """What the queue and the list of all operations filter by besides state: where the work is,
    what it is, how it failed and how old it is. Each a plain condition on the operation's own
    columns, read along the list's index (a page of ``size + 1`` rows, never a count of them all)."""

    workspace = django_filters.ModelChoiceFilter(
        label="Workspace", queryset=Workspace.objects.all(), empty_label="All workspaces"
    )
    action = django_filters.ChoiceFilter(
        label="Action", empty_label=None, choices=lambda: action_choices("All actions")
    )
    destination = django_filters.ChoiceFilter(
        label="Destination", empty_label=None, choices=destination_choices, method="filter_destination"
    )
    category = django_filters.ChoiceFilter(
        label="Last error", empty_label="Any error or none", choices=ERROR_CATEGORIES, field_name="last_error_category"
    )
    age = django_filters.ChoiceFilter(label="Age", empty_label="Any age", choices=AGE_CHOICES, method="filter_age")
    assigned = django_filters.ChoiceFilter(
        label="Taken", empty_label="Taken or not", choices=ASSIGNED_CHOICES, method="filter_assigned"
    )
    q = django_filters.CharFilter(
        label="Key or request id",
        method="filter_q",
        widget=forms.TextInput(attrs={"placeholder": "or destination record id"}),
    )

    def __init__(self, *args, user=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.user = user

    def filter_assigned(self, queryset, name, value):
        if value == "mine":
            return queryset.filter(assigned_to=self.user.pk if self.user else None)
        return queryset.filter(assigned_to__isnull=value == "nobody")

    def filter_destination(self, queryset, name, value):
        return queryset.filter(work_lists.for_destination(value))

    def filter_age(self, queryset, name, value):
        return queryset.filter(work_lists.older_than(value))

    def filter_q(self, queryset, name, value):
        value = value.strip()
        return queryset.filter(key_or_request_id(value)) if value else queryset

    def keep(self, queryset, name, value):
        return queryset

    def chosen(self, name: str):
        """The value the form took for ``name``; None unbound, or for a refused value (a form error)."""
        if not self.is_bound:
            return None
        self.is_valid()  # cleaned_data holds the values the form took
        return self.form.cleaned_data.get(name)


@dataclass(frozen=True)
class Sort:
    """One order of the queue: by a time column and id, newest first unless ``ascending``."""

    name: str
    field: str
    ascending: bool
    label: str

    @property
    def column(self) -> str:
        """The column it sorts by, as its header reads."""
        return "Updated" if self.field == "updated_at" else "Arrived"


# Each is read through an index on (field, id), both ways (migrations 0007 and 0020).
QUEUE_SORTS = {
    sort.name: sort
    for sort in [
        Sort("updated", "updated_at", False, "Updated, latest first"),
        Sort("least_updated", "updated_at", True, "Updated, earliest first"),
        Sort("newest", "created_at", False, "Arrived, newest first"),
        Sort("oldest", "created_at", True, "Arrived, oldest first"),
    ]
}
DEFAULT_SORT = QUEUE_SORTS["updated"]


class QueueFilter(WorkFilters):
    state = django_filters.ChoiceFilter(
        label="State",
        empty_label=None,
        method="filter_state",
        choices=[("all", "All that need attention")]
        + [(state.value, LABELS[state]) for state in ATTENTION_STATES]
        + [(DUE, "Due for their callers' claims"), (HELD, "Held (paused)")],
    )
    # A failure group of /console/failures/ (ledger.reads.failure_groups.Criterion), from its link.
    group = django_filters.CharFilter(label="Failure group", method="filter_group", widget=forms.HiddenInput)
    # The order, not a filter: keyset.paginate applies it (the column headers link to it too).
    sort = django_filters.ChoiceFilter(
        label="Sort",
        empty_label=None,
        method="keep",
        choices=[(sort.name, sort.label) for sort in QUEUE_SORTS.values()],
    )

    class Meta:
        model = Operation
        fields = ["state", "workspace", "action", "destination", "category", "age", "assigned", "q", "group", "sort"]

    def filter_state(self, queryset, name, value):
        # The view chose the operations of the state as the queryset already (tables.queue_listing):
        # "state = x" alone, not "state IN (...) AND state = x", whose row estimate misleads
        # PostgreSQL into sorting every row of the state instead of reading its index in order.
        return queryset

    @property
    def chosen_sort(self) -> Sort:
        return QUEUE_SORTS.get(self.chosen("sort"), DEFAULT_SORT)

    @property
    def chosen_state(self) -> str:
        return self.chosen("state") or "all"

    def narrowed(self, queryset):
        """``queryset`` with every filter but the state applied, as ``qs`` applies them (each
        state's count uses it)."""
        if not self.is_bound:
            return queryset
        self.is_valid()  # cleaned_data holds the values the form took
        for name, value in self.form.cleaned_data.items():
            if name != "state":
                queryset = self.filters[name].filter(queryset, value)
        return queryset

    def filter_group(self, queryset, name, value):
        criterion = Criterion.parse(value)
        return queryset.filter(criterion.filter()) if criterion else queryset.none()


# The list of all operations, in arrival order: along the primary key (ids are given in arrival
# order), the one index every operation is in, so no index more slows every write.
ALL_SORTS = {"newest": ("Arrived, newest first", False), "oldest": ("Arrived, oldest first", True)}


class OperationsFilter(WorkFilters):
    """The list of all operations, finished ones too: any state, the queue's other filters."""

    state = django_filters.ChoiceFilter(
        label="State", empty_label="Any state", choices=[(state.value, LABELS[state]) for state in State]
    )
    sort = django_filters.ChoiceFilter(
        label="Sort", empty_label=None, method="keep", choices=[(name, label) for name, (label, _) in ALL_SORTS.items()]
    )

    class Meta:
        model = Operation
        fields = ["state", "workspace", "action", "destination", "category", "age", "assigned", "q", "sort"]

    @property
    def ascending(self) -> bool:
        return ALL_SORTS.get(self.chosen("sort") or "newest", ALL_SORTS["newest"])[1]


def _start_of(day) -> datetime:
    return timezone.make_aware(datetime.combine(day, time.min))


# Dates outside these bounds are refused as a form error: the day after 9999-12-31, or the start of
# year 1 in another time zone, cannot be computed at all.
EARLIEST_DAY, LATEST_DAY = date(1970, 1, 1), date(2999, 12, 31)


def _day_filter(label: str, method: str) -> django_filters.DateFilter:
    return django_filters.DateFilter(
        label=label,
        method=method,
        validators=[MinValueValidator(EARLIEST_DAY), MaxValueValidator(LATEST_DAY)],
        widget=forms.DateInput(attrs={"type": "date", "min": EARLIEST_DAY.isoformat(), "max": LATEST_DAY.isoformat()}),
    )


class AuditFilter(django_filters.FilterSet):
    # The kinds the code writes, by topic: offered without reading the trail.
    kind = django_filters.ChoiceFilter(
        label="Kind",
        choices=[(topic, [(kind, kind) for kind in kinds]) for topic, kinds in AUDIT_KIND_GROUPS.items()],
        empty_label="All kinds",
    )
    # A whole name in any case, read through an index on it: a substring would scan the trail.
    actor = django_filters.CharFilter(
        label="Actor", lookup_expr="iexact", widget=forms.TextInput(attrs={"placeholder": "e.g. alice, worker-1"})
    )
    workspace = django_filters.ModelChoiceFilter(
        label="Workspace", queryset=Workspace.objects.all(), empty_label="All workspaces"
    )
    key = django_filters.CharFilter(
        label="Key or request id",
        method="filter_key",
        widget=forms.TextInput(attrs={"placeholder": "or destination record id"}),
    )
    # Both dates are inclusive; compared as a range on created_at so the index stays usable.
    created_after = _day_filter("Created after", "filter_after")
    created_before = _day_filter("Created before", "filter_before")

    class Meta:
        model = AuditEvent
        fields = ["kind", "actor", "workspace", "key", "created_after", "created_before"]

    def filter_key(self, queryset, name, value):
        value = value.strip()
        return queryset.filter(key_or_request_id(value, via="operation__")) if value else queryset

    def filter_after(self, queryset, name, value):
        return queryset.filter(created_at__gte=_start_of(value))

    def filter_before(self, queryset, name, value):
        return queryset.filter(created_at__lt=_start_of(value + timedelta(days=1)))


def audit_search(params, user) -> AuditFilter:
    """The audit search from ``params`` (a query string's QueryDict) over the events ``user`` may
    see, read from the replica when there is one: the page and its export only show them."""
    events = roles.visible(AuditEvent.objects.using(replica.for_lists()), user)
    filterset = AuditFilter(params or None, queryset=events)
    filterset.filters["workspace"].queryset = roles.workspaces(user)
    return filterset
