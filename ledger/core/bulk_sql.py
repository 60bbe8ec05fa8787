"""Writing many rows in one statement where the ORM would build a statement per row, or a CASE
per column whose size grows with the rows (and whose cost, per row, with it)."""

from django.db import connection


def update_each(model, pks: list, **how) -> int:
    """``UPDATE .. FROM (VALUES ..)`` (``how``: see ``_update_each_sql``). Returns how many rows changed."""
    if not pks:
        return 0
    sql, params = _update_each_sql(model, pks, **how)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.rowcount


def update_each_returning_pks(model, pks: list, **how) -> set:
    """``update_each``, but the pks of the rows that changed come back (``RETURNING``): the caller
    learns which rows a guard kept, in the same statement."""
    if not pks:
        return set()
    sql, params = _update_each_sql(model, pks, **how)
    with connection.cursor() as cursor:
        cursor.execute(f"{sql} RETURNING {connection.ops.quote_name(model._meta.pk.column)}", params)
        return {row[0] for row in cursor.fetchall()}


def _update_each_sql(
    model,
    pks: list,
    *,
    match: dict[str, list],
    each: dict[str, list],
    same: dict,
    where: dict,
    increment: tuple[str, ...] = (),
) -> tuple[str, list]:
    """Each row, found by its pk and the ``match`` columns (and the ``where`` values), gets its own
    ``each`` values and the ``same`` ones; ``increment`` columns grow by one."""
    quote = connection.ops.quote_name
    table = quote(model._meta.db_table)
    field = model._meta.get_field
    keys = [model._meta.pk, *map(field, match)]
    columns = [*keys, *map(field, each)]
    # PostgreSQL names the columns of a VALUES list column1, column2, ...
    held = {column: f"held.column{index}" for index, column in enumerate(columns, start=1)}
    assignments = [f"{quote(field(name).column)} = %s" for name in same]
    assignments += [f"{quote(column.column)} = {held[column]}" for column in columns[len(keys) :]]
    assignments += [f"{quote(field(name).column)} = {table}.{quote(field(name).column)} + 1" for name in increment]
    params = [field(name).get_db_prep_save(value, connection) for name, value in same.items()]
    rows: list[str] = []
    # PostgreSQL types a VALUES column from its values: a column of NULLs alone would be text,
    # which a jsonb column does not take. The first row names each column's type.
    typed = [f"%s::{column.db_type(connection)}" for column in columns]
    for row in zip(pks, *match.values(), *each.values(), strict=True):
        rows.append("(" + ", ".join(typed if not rows else ["%s"] * len(row)) + ")")
        params += [column.get_db_prep_save(value, connection) for column, value in zip(columns, row, strict=True)]
    conditions = [f"{table}.{quote(column.column)} = {held[column]}" for column in keys]
    conditions += [f"{table}.{quote(field(name).column)} = %s" for name in where]
    params += [field(name).get_db_prep_save(value, connection) for name, value in where.items()]
    return (
        f"UPDATE {table} SET {', '.join(assignments)} FROM (VALUES {', '.join(rows)}) AS held "
        f"WHERE {' AND '.join(conditions)}",
        params,
    )
