"""The audit chain keyed, TRUNCATE refused, the heads exported.

The review found that whoever owns the database could rewrite the chain unseen: turn the append-only
trigger off (``session_replication_role = replica``), edit an event, recompute every later hash with
the database's own ``ledger_audit_hash``; or TRUNCATE the table, which no trigger refused.

- ``hash_key``: the id of the key an event's hash is an HMAC-SHA256 under. The events already
  written keep "" (their scheme, the unkeyed SHA-256, is verified as such); new ones carry the
  current ``OPSCONSOLE_AUDIT_KEY_ID`` (the model's default).
- ``ledger_audit_hash`` (0009) is made again: for an event with a ``hash_key`` it is the
  HMAC-SHA256 (RFC 2104) under the secret whose two pads the event's JSON carries beside its columns
  (``audit_ipad``, ``audit_opad``: the key's 64-byte block XOR 0x36 and XOR 0x5c, in hex, put there
  by ``ledger.audit.keyed``, left out of the row by ``jsonb_populate_record``), computed with
  PostgreSQL's built-in ``sha256()`` alone: ``sha256(opad || sha256(ipad || message))``. No
  pgcrypto, which not every PostgreSQL has (the embedded server of `make demo`/`make test` has
  not). The key is a parameter of each append, never in a table or a setting of the database.
  (First written with pgcrypto's ``hmac()`` under the secret itself; 0031 brings a database that
  applied that version to this one.) Its callers (``ledger_audit_append`` 0021, ``ledger_reserve``
  0009/0024, ``ledger_reserve_one`` 0024, ``ledger_finish_claimed`` 0029) are unchanged: they pass
  the event's JSON as before, and Python puts the key's pads in it. Without the key a keyed event is refused (``ledger_audit_no_key``).
- A statement trigger refuses TRUNCATE of ``ledger_auditevent`` (the row trigger of 0002 refuses
  UPDATE and DELETE).
- A django-q2 schedule exports the chains' heads (``ledger.tasks.export_audit_heads``).
"""

from django.db import migrations, models

# The one import of code that serves: the state's default of hash_key is the model's callable, by
# its path, as makemigrations writes it (the database's default is ""; nothing runs it here).
import ledger.models.audit
from ledger.migration_helpers import ensure_schedule

# ledger.audit.event_hash, in SQL: the encoding of 0009 (each field as its length in UTF-8 bytes, a
# colon and its text), hashed with HMAC-SHA256 under the event's key (from its pads), or SHA-256 for
# an event of before keys. tests/ledger/core/test_audit_keyed.py holds the two to the same bytes.
AUDIT_HASH = """
CREATE OR REPLACE FUNCTION ledger_audit_encoding(event jsonb) RETURNS bytea
LANGUAGE sql STABLE AS $$
SELECT convert_to(
    ledger_audit_field(event->>'prev_hash') || ledger_audit_field(event->>'workspace_id')
    || ledger_audit_field(event->>'operation_id') || ledger_audit_field(event->>'attempt_id')
    || ledger_audit_field(event->>'actor') || ledger_audit_field(event->>'kind')
    || ledger_audit_field(event->>'from_state') || ledger_audit_field(event->>'to_state')
    || ledger_audit_field(event->>'error_category') || ledger_audit_field(event->>'message')
    || ledger_audit_field((extract(epoch FROM (event->>'created_at')::timestamptz) * 1000000)::bigint::text),
    'UTF8')
$$;

-- Called only when a keyed event came without its key. STABLE, so ledger_audit_hash stays inlinable.
CREATE OR REPLACE FUNCTION ledger_audit_no_key(key_id text) RETURNS text
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RAISE EXCEPTION 'audit event hashed under key id % without its key (ledger.audit.keyed puts it in the row)', key_id;
END
$$;

-- Plain expressions (no query), so the planner inlines it where it is called.
CREATE OR REPLACE FUNCTION ledger_audit_hash(event jsonb) RETURNS text
LANGUAGE sql STABLE AS $$
SELECT CASE WHEN coalesce(event->>'hash_key', '') = '' THEN encode(sha256(ledger_audit_encoding(event)), 'hex')
            ELSE coalesce(encode(sha256(decode(event->>'audit_opad', 'hex')
                                        || sha256(decode(event->>'audit_ipad', 'hex') || ledger_audit_encoding(event))),
                                 'hex'),
                          ledger_audit_no_key(event->>'hash_key')) END
$$;
"""

NO_TRUNCATE = """
CREATE OR REPLACE FUNCTION ledger_audit_no_truncate() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'ledger_auditevent is append-only: TRUNCATE refused';
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER ledger_auditevent_no_truncate
    BEFORE TRUNCATE ON ledger_auditevent
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_audit_no_truncate();
"""

UNDO = """
DROP TRIGGER IF EXISTS ledger_auditevent_no_truncate ON ledger_auditevent;
DROP FUNCTION IF EXISTS ledger_audit_no_truncate();
DROP FUNCTION IF EXISTS ledger_audit_hash(jsonb);
DROP FUNCTION IF EXISTS ledger_audit_no_key(text);
DROP FUNCTION IF EXISTS ledger_audit_encoding(jsonb);
"""

# ledger_audit_field and ledger_audit_hash as 0009 made them, for unapplying this migration (a copy:
# a migration imports no other).
AUDIT_HASH_BEFORE = """
CREATE OR REPLACE FUNCTION ledger_audit_field(value text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$ SELECT octet_length(coalesce(value, ''))::text || ':' || coalesce(value, '') $$;

-- Plain expressions (no query), so the planner inlines it where it is called.
CREATE OR REPLACE FUNCTION ledger_audit_hash(event jsonb) RETURNS text
LANGUAGE sql STABLE AS $$
SELECT encode(sha256(convert_to(
    ledger_audit_field(event->>'prev_hash') || ledger_audit_field(event->>'workspace_id')
    || ledger_audit_field(event->>'operation_id') || ledger_audit_field(event->>'attempt_id')
    || ledger_audit_field(event->>'actor') || ledger_audit_field(event->>'kind')
    || ledger_audit_field(event->>'from_state') || ledger_audit_field(event->>'to_state')
    || ledger_audit_field(event->>'error_category') || ledger_audit_field(event->>'message')
    || ledger_audit_field((extract(epoch FROM (event->>'created_at')::timestamptz) * 1000000)::bigint::text),
    'UTF8')), 'hex')
$$;
"""

def create_functions(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(AUDIT_HASH, params=None)
        schema_editor.execute(NO_TRUNCATE, params=None)


def restore_functions(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(UNDO, params=None)
        schema_editor.execute(AUDIT_HASH_BEFORE, params=None)


# The row is written here, on the historical Schedule, through the frozen helper (not through
# ledger.engine.schedules, code that serves and may change; see 0003).
AUDIT_HEADS_SCHEDULE = "opsconsole-audit-heads"


def create_schedule(apps, schema_editor):
    ensure_schedule(apps.get_model("django_q", "Schedule"), name=AUDIT_HEADS_SCHEDULE,
                    func="ledger.tasks.export_audit_heads", minutes=5)


def drop_schedule(apps, schema_editor):
    apps.get_model("django_q", "Schedule").objects.filter(name=AUDIT_HEADS_SCHEDULE).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0029_finish_claimed_in_database"),
        ("django_q", "0019_alter_task_options_alter_ormq_key_alter_ormq_lock_and_more"),
    ]

    operations = [
        # The rows already written get "" (hashed before keys); the model's default, the current key
        # id, is for new events only.
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.AddField(
                model_name="auditevent", name="hash_key",
                field=models.CharField(blank=True, default="", max_length=16),
            )],
            state_operations=[migrations.AddField(
                model_name="auditevent", name="hash_key",
                field=models.CharField(blank=True, default=ledger.models.audit.current_audit_key_id, max_length=16),
            )],
        ),
        migrations.RunPython(create_functions, restore_functions, elidable=False),
        migrations.RunPython(create_schedule, drop_schedule),
    ]
