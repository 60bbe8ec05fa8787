"""ApiToken.scopes: what a token may be used for (events, claims, read, operate, approve).

Every token already issued, and every one a process of the release before inserts while a deploy
migrates, gets the database default: events, claims and read, what every token could do before, so
none stops working; acting on operations (operate, approve) is given by name (``manage.py token``).
"""

import django.contrib.postgres.fields
from django.conf import settings
from django.db import migrations, models

import ledger.models.people


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0051_caller_actions"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name="apitoken",
            name="scopes",
            field=django.contrib.postgres.fields.ArrayField(
                base_field=models.CharField(
                    choices=[
                        ("events", "submit events"),
                        ("claims", "claim, heartbeat and report the operations its caller performs"),
                        ("read", "read operations and pauses"),
                        ("operate", "replay, resolve, cancel, take, decide conflicts, pause and resume"),
                        ("approve", "approve or reject (a person's token only)"),
                    ],
                    max_length=10,
                ),
                db_default=models.Value(
                    ["events", "claims", "read"],
                    django.contrib.postgres.fields.ArrayField(base_field=models.CharField(max_length=10), size=None),
                ),
                default=ledger.models.people.default_scopes,
                help_text="What the token may be used for.",
                size=None,
            ),
        ),
        migrations.AddConstraint(
            model_name="apitoken",
            constraint=models.CheckConstraint(
                condition=models.Q(("scopes__contained_by", ["events", "claims", "read", "operate", "approve"])),
                name="apitoken_scopes_valid",
            ),
        ),
    ]
