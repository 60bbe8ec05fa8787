"""Indexes for finding anything (the console's "Find" box, ledger.finding) and for the deliveries
page, at a million operations: the destination's record id of operations and of attempts, the
delivery and correlation ids senders give, and the refused arrivals newest first (overall, per
outcome and per workspace). All partial: a row without the id, or an accepted delivery, is in
none of them. The two on sender ids are paid for by intake: about 10 us a delivery that carries
both (100,000-row inserts at a million deliveries, on a busy machine), none for one without.

Non-atomic and, on PostgreSQL, built CONCURRENTLY, as in 0007: the tables are the ledger's largest,
and a plain CREATE INDEX would block intake for the whole build. If a build fails it leaves an
INVALID index: drop it, then migrate again.
"""

from django.db import migrations, models
from django.db.models import Q

from ledger.migration_helpers import AddIndexConcurrentlyOnPostgres

REFUSED = Q(outcome__in=["conflict", "invalid", "stale"])


class Migration(migrations.Migration):
    atomic = False

    dependencies = [("ledger", "0017_dashboard_samples")]

    operations = [
        AddIndexConcurrentlyOnPostgres(
            model_name="operation",
            index=models.Index(condition=~Q(external_id=""), fields=["external_id"], name="operation_external_id_idx"),
        ),
        AddIndexConcurrentlyOnPostgres(
            model_name="attempt",
            index=models.Index(condition=~Q(external_id=""), fields=["external_id"], name="attempt_external_id_idx"),
        ),
        AddIndexConcurrentlyOnPostgres(
            model_name="delivery",
            index=models.Index(condition=~Q(delivery_id=""), fields=["delivery_id"], name="delivery_sender_id_idx"),
        ),
        AddIndexConcurrentlyOnPostgres(
            model_name="delivery",
            index=models.Index(condition=~Q(correlation_id=""), fields=["correlation_id"],
                               name="delivery_correlation_idx"),
        ),
        AddIndexConcurrentlyOnPostgres(
            model_name="delivery",
            index=models.Index(condition=REFUSED, fields=["received_at", "id"], name="delivery_refused_time_idx"),
        ),
        AddIndexConcurrentlyOnPostgres(
            model_name="delivery",
            index=models.Index(condition=REFUSED, fields=["outcome", "received_at", "id"],
                               name="delivery_refused_outcome_idx"),
        ),
        AddIndexConcurrentlyOnPostgres(
            model_name="delivery",
            index=models.Index(condition=REFUSED, fields=["workspace", "received_at", "id"],
                               name="delivery_refused_ws_time_idx"),
        ),
    ]
