"""Error pages for what no view answered or a view refused: under /api/ as JSON (the API's
documented NotFound body), elsewhere the styled templates with the console's layout, a sentence on
what happened and a way back (templates/403.html, 403_csrf.html, 404.html, 405.html, 500.html)."""

from django.contrib.auth.models import AnonymousUser
from django.http import Http404, HttpResponseServerError
from django.shortcuts import render
from django.template import loader
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views import defaults
from django.views.decorators.csrf import csrf_exempt

from opsconsole.api import answers


def not_found(request, exception):
    if request.path.startswith("/api/"):
        return api_not_found(request)
    return defaults.page_not_found(request, exception)


# The name of the last route under /api/: what it matches, matched nothing else (counted as unmatched,
# opsconsole.requests_metrics).
API_UNMATCHED = "api-unmatched"


@csrf_exempt  # the API authenticates by bearer token, never by cookie: a POST here is no forgery
def api_not_found(request, *args, **kwargs):
    """A path under /api/ that no route matches (say a key with a line break, which Django's path
    converter refuses): still the API's answer, not the console's HTML page, whatever the method.
    Routed (the last pattern under /api/) rather than left to ``handler404``, which DEBUG replaces
    with Django's page."""
    return answers.respond(answers.NO_SUCH_RESOURCE, 404)


# What the 500 page's layout (base.html) reads, given rather than looked up: the page is rendered
# while the failure is being handled, so a variable it looked for in vain would be logged (Django's
# template debug line) with that failure's traceback chained to it, message and all; and nothing the
# failed request holds (its session, its user, the database) is asked again.
_SERVER_ERROR_CONTEXT = {"user": AnonymousUser(), "messages": ()}


def server_error(request):
    """500: under /api/ the API's JSON (an automation reads the status and retries), elsewhere the
    console's page; neither says more than that it failed (the log has the traceback)."""
    if request.path.startswith("/api/"):
        return answers.respond(answers.INTERNAL_ERROR, 500)
    return HttpResponseServerError(loader.render_to_string("500.html", _SERVER_ERROR_CONTEXT))


def permission_denied(request, exception):
    """403: what the person may not do (the view's ``PermissionDenied`` says it) and a way back."""
    return render(request, "403.html", {"exception": str(exception), "back": _back(request)}, status=403)


def csrf_failure(request, reason=""):
    """A form sent without a valid CSRF token (``CSRF_FAILURE_VIEW``): nothing was done; say why it
    happens and lead back to the page, where a reload brings a fresh token."""
    return render(request, "403_csrf.html", {"reason": reason, "back": _back(request)}, status=403)


class MethodNotAllowedPageMiddleware:
    """A bare 405 (``require_POST`` answers a GET of an action's address with an empty body) becomes
    the styled page for people; the API's answers are its own."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if response.status_code != 405 or response.content or request.path.startswith("/api/"):
            return response
        page = render(request, "405.html", {"back": _back(request)}, status=405)
        page["Allow"] = response.get("Allow", "")
        return page


class NotFoundPageMiddleware:
    """A 404 a person meets is the console's page with DEBUG on too (``make demo``): Django would
    show its debug page instead of ``handler404``, listing the project's URL patterns to a newcomer.
    A view's ``Http404`` and an address no pattern matched (``request.resolver_match`` unset) get the
    page; the API's answers are its own (``api_not_found``), and a view's own 404 response stays."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        unmatched = response.status_code == 404 and request.resolver_match is None
        if unmatched and not request.path.startswith("/api/"):
            return defaults.page_not_found(request, Http404())
        return response

    def process_exception(self, request, exception):
        if isinstance(exception, Http404) and not request.path.startswith("/api/"):
            return defaults.page_not_found(request, exception)
        return None


def _back(request) -> str:
    """Where "Back" leads: the page the person came from, when it is one of ours (and not the
    address that failed), else what needs attention."""
    referer = request.META.get("HTTP_REFERER", "")
    ours = url_has_allowed_host_and_scheme(
        referer, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    )
    if ours and referer != request.build_absolute_uri():
        return referer
    return reverse("console:queue")
