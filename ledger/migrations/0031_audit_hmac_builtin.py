"""``ledger_audit_hash`` as 0030 now makes it, on a database that applied 0030 before it changed.

0030 first computed the keyed hash with pgcrypto's ``hmac()`` under the secret itself (``audit_key``
in the event's JSON). It now computes the same HMAC-SHA256 with the built-in ``sha256()`` from the
key's two pads (``audit_ipad``, ``audit_opad``), which is all ``ledger.audit.keyed`` sends, so no
database needs pgcrypto. A fresh database gets that function from 0030 and this is a no-op for it; a
database that applied the first 0030 gets it here, so both end the same. pgcrypto, if 0030 created
it there, is left installed (nothing of the ledger uses it any longer). Reversed: nothing to undo,
the function is the one 0030 makes.
"""

import importlib

from django.db import migrations

_0030 = importlib.import_module("ledger.migrations.0030_audit_keyed")


def recreate_audit_hash(apps, schema_editor):
    schema_editor.execute(_0030.AUDIT_HASH, params=None)


class Migration(migrations.Migration):
    dependencies = [("ledger", "0030_audit_keyed")]

    operations = [migrations.RunPython(recreate_audit_hash, migrations.RunPython.noop, elidable=False)]
