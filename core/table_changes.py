"""Writes to watched tables, announced to every process through the shared Redis once they are
committed: what a process keeps from those tables (deploy.api keeps a predict caller's lookup)
stays good exactly as long as the table's token has not moved.

Every statement Django sends on any connection passes `_watch` (a database execute wrapper,
installed as each connection opens). A statement that writes a watched table moves that
table's token (a fresh random value, so a Redis that restarted never hands an old token back)
after the transaction commits, and not at all if it rolls back:

- an INSERT, unless the table was watched with `inserts=False` (a new row cannot take
  anything away from a lookup that found its own rows);
- a DELETE or a TRUNCATE (and any statement but a read whose shape is not one of these: every
  watched table it names);
- an UPDATE that sets a column in `columns` (None: any column) other than those in `quiet`.
  Its columns are read from its SET clause as Django writes it (`UPDATE "t" SET "a" = %s,
  "b" = ("b" + %s) WHERE ...`); an UPDATE of any other shape counts as a change to every
  column.

So a change made through the ORM, a queryset's update() or raw SQL on Django's connection
reaches every kept lookup at once, whichever app or process made it. A change made outside
Django (psql) is not seen: what is kept must lapse on its own too (deploy.api: seconds).
"""

import logging
import re
import secrets
from collections.abc import Iterable

import redis
from django.conf import settings
from django.db import connections
from django.db.backends.signals import connection_created

from core.redis_clients import shared_client

logger = logging.getLogger(__name__)

PREFIX = "kestrel:table-changes:"
# table → (columns, quiet, inserts), as tables_watch says
_watched: dict[str, tuple[frozenset[str] | None, frozenset[str], bool]] = {}
_reading_last: tuple | None = None
_moves_seen = 0

_WRITE = re.compile(
    r'\s*(?:(INSERT)\s+(?:OR\s+\w+\s+)?INTO|(UPDATE)|(DELETE)\s+FROM|(TRUNCATE))\s+"?(\w+)"?',
    re.IGNORECASE,
)
_FIRST_WORD = re.compile(r"\s*([A-Za-z]+)")
# Statements that write no row: those that begin so are let through unread.
_READS = frozenset(
    ("SELECT", "SAVEPOINT", "RELEASE", "ROLLBACK", "BEGIN", "COMMIT", "SET", "SHOW", "EXPLAIN")
    + ("PRAGMA", "DECLARE", "FETCH", "CLOSE", "VALUES", "LISTEN", "NOTIFY", "DEALLOCATE")
)
_UPDATE_SET = re.compile(r'\s*UPDATE\s+"?\w+"?\s+SET\s+', re.IGNORECASE)
_ASSIGNED = re.compile(r'"(\w+)"\s*=')


def tables_watch(
    table: str,
    *,
    columns: Iterable[str] | None = None,
    quiet: Iterable[str] = (),
    inserts: bool = True,
) -> None:
    """Watch `table` (its db_table): see the module's docstring. Watched again, what counts
    adds up: the columns, a column quiet only if quiet for every watcher, inserts if any."""
    if table in _watched:
        old_columns, old_quiet, old_inserts = _watched[table]
        merged = None if columns is None or old_columns is None else old_columns | set(columns)
        _watched[table] = (merged, old_quiet & set(quiet), old_inserts or inserts)
    else:
        _watched[table] = (
            None if columns is None else frozenset(columns),
            frozenset(quiet),
            inserts,
        )
    connection_created.connect(_on_connection, dispatch_uid="core.table_changes")
    for connection in connections.all(initialized_only=True):  # opened before: watched too
        _on_connection(None, connection)


def tables_watched() -> dict[str, tuple[frozenset[str] | None, frozenset[str], bool]]:
    return dict(_watched)


def tables_tokens_keys() -> list[str]:
    """The Redis keys of every watched table's token, in a fixed order."""
    return [PREFIX + table for table in sorted(_watched)]


def tables_tokens_read() -> tuple:
    """Every watched table's token now (one round trip): compare with a later reading, in the
    same order (tables_tokens_keys), to learn whether any of them changed in between."""
    keys = tables_tokens_keys()
    return tuple(_redis().mget(keys)) if keys else ()


def tables_reading_note(reading: tuple) -> None:
    """A reading of the tokens (tables_tokens_read) this process made: one that differs from
    the last counts a move (tables_moves_seen)."""
    global _reading_last, _moves_seen
    if reading != _reading_last:
        if _reading_last is not None:
            _moves_seen += 1
        _reading_last = reading


def tables_moves_seen() -> int:
    """How many times this process's readings found a token moved: what keeps something of
    the watched tables without reading the tokens itself (the request guard's predict grants)
    stays good while this number does not change."""
    return _moves_seen


def _redis() -> redis.Redis:
    # A write waits for its announcement: never long, even for a Redis that is away.
    return shared_client(settings.TRAINING_REDIS_URL, socket_timeout=1, socket_connect_timeout=1)


def _on_connection(sender, connection, **kwargs) -> None:
    # First in the list: `connection.execute_wrapper()` pops the last one when it ends, and a
    # connection may open inside one.
    if _watch not in connection.execute_wrappers:
        connection.execute_wrappers.insert(0, _watch)


def _watch(execute, sql, params, many, context):
    result = execute(sql, params, many, context)
    tables = statement_changes(sql)
    if tables:
        connection = context["connection"]
        if connection.in_atomic_block:
            connection.on_commit(lambda: _announce(tables))
        else:  # committed already (autocommit), or a transaction managed by hand: at once
            _announce(tables)
    return result


def statement_changes(sql) -> tuple[str, ...]:
    """The watched tables whose rows, as a kept lookup reads them, `sql` may change."""
    if not _watched:
        return ()
    if not isinstance(sql, str):
        return tuple(_watched)  # composed SQL, not read: anything may have changed
    first = _FIRST_WORD.match(sql)
    head = first.group(1).upper() if first else ""
    if head in _READS:
        return ()
    found = _WRITE.match(sql) if head != "TRUNCATE" else None
    if found is None:  # a TRUNCATE, WITH ... UPDATE, a comment first: every table it names
        return tuple(t for t in _watched if re.search(rf"\b{t}\b", sql))
    insert, update, _, _, table = found.groups()
    watch = _watched.get(table)
    if watch is None:
        return ()
    columns, quiet, inserts = watch
    if insert:
        return (table,) if inserts else ()
    if update and (columns is not None or quiet):
        assigned = update_columns(sql)
        if assigned is not None and not any(
            (columns is None or column in columns) and column not in quiet for column in assigned
        ):
            return ()
    return (table,)


def update_columns(sql: str) -> list[str] | None:
    """The columns an UPDATE sets, read from its SET clause as Django writes it (each
    assignment `"column" = <expression>`, split at the commas outside parentheses and string
    literals, up to the WHERE outside them); None when it is not of that shape."""
    head = _UPDATE_SET.match(sql)
    if head is None:
        return None
    columns, depth, quoted, start, i = [], 0, False, head.end(), head.end()
    end = len(sql)
    while i < end:
        char = sql[i]
        if quoted:
            quoted = char != "'"
        elif char == "'":
            quoted = True
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif depth == 0 and (char == "," or sql.startswith(" WHERE ", i)):
            column = _ASSIGNED.match(sql, start)
            if column is None:
                return None
            columns.append(column.group(1))
            if char != ",":
                return columns
            start = i + 1
            while start < end and sql[start] == " ":
                start += 1
        i += 1
    if quoted or depth:
        return None
    column = _ASSIGNED.match(sql, start)
    return None if column is None else [*columns, column.group(1)]


def _announce(tables: tuple[str, ...]) -> None:
    token = secrets.token_hex(8)
    try:
        _redis().mset({PREFIX + table: token for table in tables})
    except redis.RedisError:
        # What other processes keep still lapses on its own (deploy.api).
        logger.warning("could not announce a change to %s to other processes", ", ".join(tables))
