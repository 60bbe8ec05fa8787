"""The project's URLs: the console, the API, the admin, sign-in and /metrics."""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.templatetags.static import static
from django.urls import include, path, re_path
from django.views.generic import RedirectView

from opsconsole import errors, metrics
from opsconsole.api.endpoints import api

urlpatterns = [
    # First: the API's requests are most of the traffic, and each pattern before them is tried in vain.
    path("api/v1/", api.urls),
    re_path(r"^api/", errors.api_not_found, name=errors.API_UNMATCHED),
    path("", RedirectView.as_view(pattern_name="console:queue", permanent=False)),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(next_page="login"), name="logout"),
    path("console/", include("opsconsole.console.urls")),
    path("admin/", admin.site.urls),
    path("metrics", metrics.metrics_view, name="metrics"),
    path("favicon.ico", RedirectView.as_view(url=static("favicon.svg"), permanent=False)),
]

handler403 = "opsconsole.errors.permission_denied"
handler404 = "opsconsole.errors.not_found"
handler500 = "opsconsole.errors.server_error"
