from django.urls import path

from opsconsole.console import bulk, confirm, conflicts, dashboard, deliveries, export, find, mismatches, views

app_name = "console"

urlpatterns = [
    path("", views.queue, name="queue"),
    path("operations/<int:pk>/", views.operation, name="operation"),
    path("operations/<int:pk>/replay/", views.replay, name="replay"),
    path("operations/<int:pk>/resolve/", views.resolve, name="resolve"),
    path("operations/<int:pk>/look-up/", views.look_up, name="look_up"),
    path("operations/<int:pk>/cancel/", views.cancel, name="cancel"),
    path("operations/<int:pk>/approve/", confirm.approve, name="approve"),
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
    path("conflicts/", conflicts.inbox, name="conflicts"),
    path("conflicts/dismiss/", conflicts.dismiss_selected, name="dismiss_conflicts"),
    path("conflicts/operations/<int:pk>/dismiss/", conflicts.dismiss_operation, name="dismiss_operation_conflicts"),
    path("conflicts/<int:pk>/apply-one/", conflicts.apply_one, name="apply_one_conflict"),
    path("dashboard/", dashboard.dashboard, name="dashboard"),
    path("find/", find.find, name="find"),
    path("deliveries/", deliveries.delivery_list, name="deliveries"),
    path("failures/", bulk.failures, name="failures"),
    path("bulk/", bulk.submit, name="bulk_submit"),
    path("bulk/<int:pk>/", bulk.progress, name="bulk"),
    path("export.csv", export.queue_csv, name="queue_csv"),
    path("audit/export.csv", export.audit_csv, name="audit_csv"),
]
