"""The API's own middleware chain: ``/api/`` served through ``API_MIDDLEWARE`` only, the console
through the whole of ``MIDDLEWARE``.

An automation's request needs none of what a person's does: no session, CSRF token, user, messages,
CSP, login lockout, htmx, time zone, static files or styled error page. Each of those is a frame and
some work on every request (the 17 middleware were ~22 % of an API worker's CPU before this chain).
``ApiPathMiddleware`` sits first in ``MIDDLEWARE`` (after the probes): a request under ``/api/``
leaves the console's chain there and runs through a chain of its own, built once as Django builds
its own (``BaseHandler.load_middleware``, sync only: gunicorn's workers and the test client are
sync), with its own view and exception hooks. So gunicorn (``opsconsole.wsgi``) and Django's test
``Client`` run the very same chains, and nothing else must choose between them.
"""

from django.conf import settings
from django.core.handlers.base import BaseHandler
from django.core.handlers.exception import convert_exception_to_response
from django.utils.module_loading import import_string

API_PREFIX = "/api/"
# The API's one page for people, Swagger UI (ninja's docs_url): HTML, so the console's chain, whose
# frame and content policies it needs.
API_PAGES = frozenset({"/api/v1/docs"})


class ApiHandler(BaseHandler):
    """Django's request handling (URL resolution, view middleware, exception middleware) around the
    middleware ``settings.API_MIDDLEWARE`` names, in its order."""

    def load_middleware(self, is_async=False):
        self._view_middleware = []
        self._template_response_middleware = []
        self._exception_middleware = []
        handler = convert_exception_to_response(self._get_response)
        for path in reversed(settings.API_MIDDLEWARE):
            middleware = import_string(path)(handler)
            if hasattr(middleware, "process_view"):
                self._view_middleware.insert(0, middleware.process_view)
            if hasattr(middleware, "process_template_response"):
                self._template_response_middleware.append(middleware.process_template_response)
            if hasattr(middleware, "process_exception"):
                self._exception_middleware.append(middleware.process_exception)
            handler = convert_exception_to_response(middleware)
        self._middleware_chain = handler


class ApiPathMiddleware:
    """A request under ``/api/`` answered by the API's chain (but its docs page); any other goes on
    through the console's."""

    def __init__(self, get_response):
        self.get_response = get_response
        api = ApiHandler()
        api.load_middleware()
        self.api_chain = api._middleware_chain

    def __call__(self, request):
        if request.path_info.startswith(API_PREFIX) and request.path_info not in API_PAGES:
            return self.api_chain(request)
        return self.get_response(request)
