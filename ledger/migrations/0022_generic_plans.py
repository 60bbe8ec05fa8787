"""Generic plans for the statements of intake's and the audit chain's database functions.

PL/pgSQL keeps each statement's plan for the session, but a statement that reads a variable is
planned again for its values at every call while PostgreSQL's plan cache judges a custom plan
cheaper than the generic one. For ``ledger_reserve`` that was most calls: timed inside the function
on one event, the key lookup alone took ~125 µs replanned against ~35 µs on its kept plan, and a
call ~0.8 ms against ~0.65 ms. The plans do not depend on the values (every lookup is by a unique
or a leading key, and ``ledger_operations_of`` keeps its probes in a LATERAL with OFFSET 0), so
these functions always use the kept plan.
"""

from django.db import migrations

FUNCTIONS = ("ledger_reserve(jsonb)", "ledger_audit_append(bigint, bigint, jsonb)")


def use_generic_plans(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        for function in FUNCTIONS:
            schema_editor.execute(f"ALTER FUNCTION {function} SET plan_cache_mode = force_generic_plan", params=None)


def plan_as_before(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        for function in FUNCTIONS:
            schema_editor.execute(f"ALTER FUNCTION {function} RESET plan_cache_mode", params=None)


class Migration(migrations.Migration):
    dependencies = [("ledger", "0021_audit_append_in_database")]

    operations = [migrations.RunPython(use_generic_plans, plan_as_before, elidable=False)]
