from django.contrib import admin
from django.urls import path
from django.views.generic import RedirectView

from ledger.api import api
from opsconsole import metrics

urlpatterns = [
    path("", RedirectView.as_view(url="/admin/", permanent=False)),
    path("admin/", admin.site.urls),
    path("api/v1/", api.urls),
    path("metrics", metrics.metrics_view, name="metrics"),
]
