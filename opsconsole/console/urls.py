from django.urls import path

from opsconsole.console import export, mismatches, views

app_name = "console"

urlpatterns = [
    path("", views.queue, name="queue"),
    path("operations/<int:pk>/", views.operation, name="operation"),
    path("operations/<int:pk>/replay/", views.replay, name="replay"),
    path("operations/<int:pk>/resolve/", views.resolve, name="resolve"),
    path("operations/<int:pk>/look-up/", views.look_up, name="look_up"),
    path("operations/<int:pk>/cancel/", views.cancel, name="cancel"),
    path("operations/<int:pk>/approve/", views.approve, name="approve"),
    path("operations/<int:pk>/reject/", views.reject, name="reject"),
    path("conflicts/<int:pk>/apply/", views.apply_conflict, name="apply_conflict"),
    path("conflicts/<int:pk>/dismiss/", views.dismiss_conflict, name="dismiss_conflict"),
    path("controls/", views.controls, name="controls"),
    path("controls/pause/", views.pause, name="pause"),
    path("controls/resume/", views.resume, name="resume"),
    path("service-levels/", views.service_levels, name="service_levels"),
    path("audit/", views.audit, name="audit"),
    path("mismatches/", mismatches.mismatch_list, name="mismatches"),
    path("mismatches/<int:pk>/acknowledge/", mismatches.acknowledge, name="acknowledge_mismatch"),
    path("mismatches/<int:pk>/adopt/", mismatches.adopt, name="adopt_mismatch"),
    path("mismatches/<int:pk>/replay/", mismatches.replay, name="replay_mismatch"),
    path("export.csv", export.queue_csv, name="queue_csv"),
    path("audit/export.csv", export.audit_csv, name="audit_csv"),
]
