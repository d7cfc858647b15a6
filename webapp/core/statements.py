"""One model row's UPDATE or INSERT as SQL and parameters, for a caller that sends several writes as one statement
(PostgreSQL's data-modifying WITH): the values go through the fields as `save()` sends them (auto_now included)."""
from __future__ import annotations

from django.db import connection


def update_statement(obj, fields: list[str]) -> tuple[str, list]:
    """`UPDATE <table> SET <fields> WHERE <pk> = obj.pk`, as obj.save(update_fields=fields) would send it."""
    q = connection.ops.quote_name
    sets, params = [], []
    for name in fields:
        field = obj._meta.get_field(name)
        sets.append(f"{q(field.column)} = %s")
        params.append(field.get_db_prep_save(field.pre_save(obj, False), connection))
    return (f"UPDATE {q(obj._meta.db_table)} SET {', '.join(sets)} WHERE {q(obj._meta.pk.column)} = %s",
            [*params, obj.pk])


def insert_statement(obj) -> tuple[str, list]:
    """`INSERT INTO <table> (...) VALUES (...)` of an unsaved object with an automatic primary key."""
    q = connection.ops.quote_name
    fields = [f for f in obj._meta.concrete_fields if not (f.primary_key and f.auto_created)]
    params = [f.get_db_prep_save(f.pre_save(obj, True), connection) for f in fields]
    return (f"INSERT INTO {q(obj._meta.db_table)} ({', '.join(q(f.column) for f in fields)}) "
            f"VALUES ({', '.join(['%s'] * len(fields))})", params)


def from_row(model, values):
    """A model instance from a raw row of its concrete columns, through the converters a queryset applies."""
    fields = model._meta.concrete_fields
    out = []
    for field, value in zip(fields, values, strict=True):
        col = field.get_col(model._meta.db_table)
        for convert in connection.ops.get_db_converters(col) + col.get_db_converters(connection):
            value = convert(value, col, connection)
        out.append(value)
    return model.from_db(connection.alias, [f.attname for f in fields], out)
