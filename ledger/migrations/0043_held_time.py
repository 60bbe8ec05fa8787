"""Held time given at the claim, not written at the resume: a released pause switch keeps its
interval (``ledger_pauseinterval``), each operation when its state last moved
(``state_changed_at``), and ``ledger_held_deadline`` says what an operation's deadline is once the
pauses that held it since are given back (ledger.core.held_time). The function's text as it was.
"""

import django.db.models.deletion
from django.db import migrations, models

HELD_DEADLINE = r"""
CREATE OR REPLACE FUNCTION public.ledger_held_deadline(deadline timestamp with time zone, since timestamp with time zone, workspace bigint, action text, whole interval)
 RETURNS timestamp with time zone
 LANGUAGE plpgsql
 STABLE
AS $function$
DECLARE
    held record;
    credited timestamptz := deadline;
BEGIN
    -- In the order they ended: a pause given first moves the deadline the next one compares with.
    FOR held IN
        SELECT p.started_at, p.ended_at FROM ledger_pauseinterval p
        WHERE p.ended_at > since
          AND (p.workspace_id IS NULL OR p.workspace_id = ledger_held_deadline.workspace)
          AND (p.action = '' OR p.action = ledger_held_deadline.action)
        ORDER BY p.ended_at, p.id
    LOOP
        -- Only a deadline that had not passed when the switch was pulled was held; it gets the
        -- time held, but never more than a whole deadline from the release.
        IF credited > held.started_at THEN
            credited := greatest(credited, least(credited + (held.ended_at - held.started_at), held.ended_at + whole));
        END IF;
    END LOOP;
    RETURN credited;
END
$function$
"""


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0042_operation_assignment"),
    ]

    operations = [
        migrations.AddField(
            model_name="operation",
            name="state_changed_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.CreateModel(
            name="PauseInterval",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("action", models.CharField(blank=True, max_length=100)),
                ("started_at", models.DateTimeField()),
                ("ended_at", models.DateTimeField()),
                (
                    "workspace",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="ledger.workspace",
                    ),
                ),
            ],
            options={
                "indexes": [models.Index(fields=["ended_at"], name="pauseinterval_ended_idx")],
                "constraints": [
                    models.CheckConstraint(
                        condition=models.Q(("ended_at__gte", models.F("started_at"))), name="pauseinterval_ordered"
                    )
                ],
            },
        ),
        migrations.RunSQL(HELD_DEADLINE, reverse_sql="DROP FUNCTION ledger_held_deadline"),
    ]
