"""``ledger_audit_hash`` as 0030 now makes it, on a database that applied 0030 before it changed.

0030 first computed the keyed hash with pgcrypto's ``hmac()`` under the secret itself (``audit_key``
in the event's JSON). It now computes the same HMAC-SHA256 with the built-in ``sha256()`` from the
key's two pads (``audit_ipad``, ``audit_opad``), which is all ``ledger.audit.keyed`` sends, so no
database needs pgcrypto. A fresh database gets that function from 0030 and this is a no-op for it; a
database that applied the first 0030 gets it here, so both end the same. pgcrypto, if 0030 created
it there, is left installed (nothing of the ledger uses it any longer). Reversed: nothing to undo,
the function is the one 0030 makes.
"""

from django.db import migrations

# 0030's text, copied as it was when this migration was written (a migration imports no other).
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


def recreate_audit_hash(apps, schema_editor):
    schema_editor.execute(AUDIT_HASH, params=None)


class Migration(migrations.Migration):
    dependencies = [("ledger", "0030_audit_keyed")]

    operations = [migrations.RunPython(recreate_audit_hash, migrations.RunPython.noop, elidable=False)]
