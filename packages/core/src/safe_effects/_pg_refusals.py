"""What a PostgreSQL role short of rights is told: the grant to ask the schema's owner for, or the role that
must run the step. Workers may run as a role with DML rights only (docs/operations.md, Store schema)."""

from __future__ import annotations

from collections.abc import Collection

from ._errors import StorePermissionDenied


def quoted(name: str) -> str:
    """``name`` as a PostgreSQL identifier, ready to paste into psql."""
    return '"' + name.replace('"', '""') + '"'


def tables_refused(detail: str, role: str, schema: str) -> StorePermissionDenied:
    """A statement on the ledger's tables refused (``detail``, the server's message, names the table)."""
    schema_id, role_id = quoted(schema), quoted(role)
    return StorePermissionDenied(
        f"role {role!r} was refused a statement on the ledger in schema {schema!r} ({detail}): as the schema's "
        f"owner run GRANT USAGE ON SCHEMA {schema_id} TO {role_id}; GRANT SELECT, INSERT, UPDATE, DELETE ON ALL "
        f"TABLES IN SCHEMA {schema_id} TO {role_id} (docs/operations.md, Store schema)"
    )


def migration_refused(detail: str, role: str, schema: str, pending: Collection[int]) -> StorePermissionDenied:
    """A migration's DDL refused: workers' roles may not run it, the schema's owner must."""
    return StorePermissionDenied(
        f"schema migration(s) {', '.join(map(str, pending))} pending in schema {schema!r}; role {role!r} may not "
        f"create or change tables there ({detail}): run `safe-effects migrate` as the schema's owner"
    )
