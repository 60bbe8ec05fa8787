"""Error pages for what no view answered: under /api/ as JSON (the API's documented NotFound
body), elsewhere the styled templates (templates/404.html)."""

from django.http import JsonResponse
from django.views import defaults


def not_found(request, exception):
    if request.path.startswith("/api/"):
        # A path no route matches (say a key with a line break, which Django's path converter
        # refuses): still the API's answer, not the console's HTML page.
        return JsonResponse({"status": "not_found", "detail": "No such resource in this API."}, status=404)
    return defaults.page_not_found(request, exception)
