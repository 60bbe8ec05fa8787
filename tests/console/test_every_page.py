"""No template text reaches a page: every console and admin page a person can reach, read by each role
on a database that holds every kind of row, shows no ``{# #}``, ``{% %}``, ``{{ }}`` and no variable the
template could not resolve.

The pages are not listed here: they are the URL patterns the resolver knows (the console's, the admin's
for each registered model, sign-in), each filled from the rows (one id of each model). A new pattern
whose parameters cannot be filled fails the test rather than going unread, and so does a registered
model with no row to show, and a template under templates/ that no page rendered (the pages no GET
of a pattern shows, an error page or a lockout, are reached as a person meets them).
"""

import html
import json
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlencode

import pytest
from django.conf import settings
from django.contrib import admin
from django.forms.models import model_to_dict
from django.test import Client, RequestFactory
from django.test.signals import template_rendered
from django.urls import URLPattern, URLResolver, get_resolver, reverse

from ledger.integrations import templates as request_templates
from ledger.models import BulkAction, Conflict, HttpAction, Operation
from ledger.states import State
from opsconsole import middleware
from opsconsole.management.commands.demo_setup import DEMO_PASSWORD
from reconciliation.models import Mismatch
from tests.day import a_full_day  # noqa: F401  the fixture

pytestmark = pytest.mark.slow  # a day of events, then some 400 pages read five times

# What a template prints for a variable it could not resolve (TEMPLATES' string_if_invalid, set here).
UNRESOLVED = "UNRESOLVED-TEMPLATE-VARIABLE[%s]"
# A template's syntax: ``}}`` after a space only, as a variable's ends; a nested JSON object shown as
# data ends in ``}}`` too, after a value.
TEMPLATE_TEXT = re.compile(r"\{#|#\}|\{%|%\}|\{\{|\s\}\}|UNRESOLVED-TEMPLATE-VARIABLE\[[^\]]*\]")
ROLES = ("viewer", "operator", "approver", "admin")  # admin: the demo's superuser

# What fills a console page's ``pk``, by the page's name: a console pattern with a parameter that is
# not here fails the test (say here which row it shows).
CONSOLE_ROWS = {
    "operation": Operation,
    "take": Operation,
    "assign": Operation,
    "release": Operation,
    "replay": Operation,
    "resolve": Operation,
    "look_up": Operation,
    "cancel": Operation,
    "approve": Operation,
    "reject": Operation,
    "apply_conflict": Conflict,
    "dismiss_conflict": Conflict,
    "acknowledge_mismatch": Mismatch,
    "adopt_mismatch": Mismatch,
    "replay_mismatch": Mismatch,
    "apply_one_conflict": Conflict,
    "bulk": BulkAction,
}
# Pages a query fills, by name: what the page shows of the rows.
QUERIES = {
    # The confirmation of an approver's selection: every operation awaiting approval.
    "console:approvals_confirm": lambda: "?" + urlencode([("op", pk) for pk in _awaiting_approval()]),
}
# Pages that are no person's page: the API (JSON, tests/api), /metrics (text), the redirects.
NOT_PAGES = ("api/", "metrics", "favicon.ico")
# Admin patterns that lead elsewhere rather than show a page: the "view on site" shortcut.
ADMIN_ELSEWHERE = {"view_on_site"}


@dataclass
class Route:
    pattern: str  # the regex, joined from the resolver's
    name: str  # namespace:name
    callback: object


def routes(resolver=None, prefix: str = "", namespace: str = "") -> list[Route]:
    """Every URL pattern under ``resolver``, with its full regex."""
    found = []
    for entry in (resolver or get_resolver()).url_patterns:
        regex = prefix + entry.pattern.regex.pattern.lstrip("^").rstrip("$").replace("\\Z", "")
        if isinstance(entry, URLResolver):
            inner = f"{namespace}{entry.namespace}:" if entry.namespace else namespace
            found += routes(entry, regex, inner)
        elif isinstance(entry, URLPattern):
            found.append(Route(regex, f"{namespace}{entry.name or ''}", entry.callback))
    return found


def fill(route: Route) -> list[str] | None:
    """The addresses of ``route`` with its parameters filled from the rows (an address per row kind
    that shows differently: an operation of each action and state); None when no row fills it."""
    groups = set(re.compile(route.pattern).groupindex)
    model_admin = getattr(route.callback, "model_admin", None) or getattr(
        getattr(route.callback, "__wrapped__", None), "__self__", None
    )
    if not groups:
        return [_address(route.pattern, {}) + (QUERIES[route.name]() if route.name in QUERIES else "")]
    if isinstance(model_admin, admin.ModelAdmin) and len(groups) == 1 and groups < {"object_id", "id"}:
        (name,) = groups
        return [_address(route.pattern, {name: str(pk)}) for pk in _ids(model_admin.model)]
    if route.name == "admin:" and groups == {"url"}:  # the admin's catch-all: its "not found"
        return [_address(route.pattern, {"url": "no-such-page/"})]
    if groups == {"app_label"}:
        labels = {model._meta.app_label for model in admin.site._registry}
        return [_address(route.pattern, {"app_label": label}) for label in sorted(labels)]
    short = route.name.split(":")[-1]
    if route.name.startswith("console:") and groups == {"pk"} and short in CONSOLE_ROWS:
        return [_address(route.pattern, {"pk": str(pk)}) for pk in _ids(CONSOLE_ROWS[short])]
    return None


def _awaiting_approval() -> list[int]:
    return list(Operation.objects.filter(state=State.PENDING_APPROVAL).values_list("pk", flat=True))


def _ids(model) -> list:
    """An id of each model; of operations, one of each action, state and error category (each reads
    differently: a refusal, a hang-up, a conflict's hold)."""
    if model is Operation:
        seen = {}
        kinds = Operation.objects.order_by("pk").values_list("pk", "action", "state", "last_error_category")
        for pk, *kind in kinds:
            seen.setdefault(tuple(kind), pk)
        return list(seen.values())
    first = model._default_manager.order_by("pk").values_list("pk", flat=True).first()
    return [] if first is None else [first]


def _address(pattern: str, values: dict) -> str:
    """``pattern`` (a regex of named groups and literals) with each group replaced by its value."""
    address = re.sub(r"\(\?P<(\w+)>[^)]*\)", lambda group: values[group[1]], pattern)
    return "/" + address.replace("\\", "")


@pytest.fixture
def template_text_shown(settings):
    """Templates print UNRESOLVED for a variable they cannot resolve (Django prints nothing)."""
    for engine in settings.TEMPLATES:
        engine.setdefault("OPTIONS", {})["string_if_invalid"] = UNRESOLVED
    settings.TEMPLATES = [dict(engine) for engine in settings.TEMPLATES]


@pytest.mark.usefixtures("a_full_day")
def test_every_page_can_be_filled_from_the_rows():
    empty = [model.__name__ for model in admin.site._registry if not model._default_manager.exists()]
    assert not empty, f"no row to open the admin's pages of: {empty} (add one to a_full_day)"
    unfilled = [r.name or r.pattern for r in _pages() if fill(r) is None]
    assert not unfilled, f"pages whose parameters nothing fills (say how in {__name__}.fill): {unfilled}"


def test_a_page_nothing_fills_is_not_skipped():
    """A new page whose parameter no rule fills is named by the test above, not left out."""
    assert fill(Route(r"console/widgets/(?P<slug>[-a-z]+)/", "console:widget", callback=None)) is None
    assert fill(Route(r"console/widgets/(?P<pk>[0-9]+)/", "console:widget", callback=None)) is None


def _request_template_expressions() -> set[str]:
    """The ``{{ expression }}`` of the configured HTTP actions' request templates (and of their admin's
    help): data the admin shows, not template text."""
    texts = [json.dumps(model_to_dict(row), default=str) for row in HttpAction.objects.all()]
    texts += [str(field.help_text) for field in admin.site._registry[HttpAction].form.base_fields.values()]
    return {expression.strip() for text in texts for expression in request_templates.EXPRESSION.findall(text)}


def _without_data(page: str, expressions: set[str]) -> str:
    return request_templates.EXPRESSION.sub(
        lambda found: "" if html.unescape(found[1]).strip() in expressions else found[0], page
    )


def _pages() -> list[Route]:
    return [r for r in routes() if not r.pattern.startswith(NOT_PAGES) and r.name.split(":")[-1] not in ADMIN_ELSEWHERE]


@pytest.mark.usefixtures("a_full_day", "template_text_shown")
def test_no_page_shows_template_text_to_anyone(client, django_user_model):
    """Every page, as each role and as a visitor: no template syntax, no unresolved variable; and every
    template of ours was rendered by one of them (a template no page reaches is a page left unread)."""
    shown: dict[str, set[str]] = {}
    expressions = _request_template_expressions()
    rendered: set[str] = set()

    def read(name: str, response, role: str) -> None:
        if "html" not in response.get("Content-Type", ""):
            return
        page = _without_data(response.content.decode(), expressions)
        for found in TEMPLATE_TEXT.finditer(page):
            context = page[max(found.start() - 60, 0) : found.end() + 60].replace("\n", " ")
            shown.setdefault(f"{name}: ...{context}...", set()).add(role)

    def kept(sender, template, **kwargs):
        rendered.add(template.name)

    template_rendered.connect(kept, dispatch_uid=__name__)
    try:
        addresses = sorted({address for r in _pages() for address in (fill(r) or [])})
        for role in (None, *ROLES):
            client.logout()
            if role:
                client.force_login(django_user_model.objects.get(username=role))
            for address in addresses:
                read(address, client.get(address), role or "anonymous")
        for name, response in _pages_beyond_the_patterns(django_user_model).items():
            read(name, response, "anyone")
    finally:
        template_rendered.disconnect(dispatch_uid=__name__)

    assert not shown, "template text on pages:\n" + "\n".join(f"{k} (as {sorted(v)})" for k, v in sorted(shown.items()))
    unread = _our_templates() - rendered
    assert not unread, f"templates no page rendered (reach them in {__name__}): {sorted(unread)}"


def _pages_beyond_the_patterns(django_user_model) -> dict:
    """The pages no GET of a pattern shows, each as a person meets it."""
    operator = django_user_model.objects.get(username="operator")
    without_token = Client(enforce_csrf_checks=True)
    without_token.force_login(operator)
    guesser = Client()
    for _ in range(settings.AXES_FAILURE_LIMIT):
        guesser.post(reverse("login"), {"username": "operator", "password": "a guess"})
    request = RequestFactory().get("/console/")
    return {
        "a form sent without its CSRF token": without_token.post(reverse("console:pause"), {"reason": "x"}),
        "a login locked out after wrong passwords": guesser.post(
            reverse("login"), {"username": "operator", "password": DEMO_PASSWORD}
        ),
        "a server error": get_resolver().resolve_error_handler(500)(request),
        "the database out of reach": middleware.unavailable(request),
        "the database too busy": middleware.busy(request),
    }


def _our_templates() -> set[str]:
    folder = Path(settings.BASE_DIR) / "templates"
    return {str(path.relative_to(folder)) for path in folder.rglob("*.html")}
