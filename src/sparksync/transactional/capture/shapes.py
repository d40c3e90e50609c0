"""A PostgreSQL publisher's row changes as the log reader stores them, undecoded.

Consecutive changes of one transaction and one relation are stored as one ``rows`` command: the
server's Insert / Update / Delete messages, each behind its length, at most :data:`CHUNK_CHANGES` of
them and about :data:`CHUNK_BYTES`. With them goes the *shape* that decodes them (:class:`ShapeDef`,
an ``MSrepl_shapes`` row): the Relation message the server sent before them and the article's columns
at that point of the log. The capture writes this form (``logical.py``); the distribution agent's
tasks decode it (``delivery/decoding.py``). All the log reader reads of a change is its tag byte:
whether its before image is there (:func:`before_image_missing`).
"""

from __future__ import annotations

import hashlib
import json
import struct
from dataclasses import dataclass

from sparksync.errors import SchemaError

CHUNK_CHANGES = 1_000       # row changes stored in one "rows" command at most
CHUNK_BYTES = 1 << 20       # and bytes of messages
CHUNK_LENGTH = struct.Struct("!I")     # each message of a chunk behind its length
_INSERT, _UPDATE, _DELETE, _OLD = ord("I"), ord("U"), ord("D"), ord("O")
OPERATIONS = {_INSERT: "ins", _UPDATE: "upd", _DELETE: "del"}


@dataclass(frozen=True)
class ShapeDef:
    """What decodes one relation's messages (an ``MSrepl_shapes`` row; picklable, for the tasks)."""

    shape_id: str
    article_id: int
    relation: bytes               # the pgoutput Relation message
    table_schema: dict            # the article's columns when the shape was made

    @classmethod
    def make(cls, article_id: int, relation: bytes, table_schema: dict) -> ShapeDef:
        digest = hashlib.sha1(relation)
        digest.update(json.dumps(table_schema, sort_keys=True, separators=(",", ":")).encode())
        return cls(f"{article_id}:{digest.hexdigest()[:20]}", article_id, bytes(relation), table_schema)


class NoBeforeImage(SchemaError):
    """An update or delete in the log without its before image: made while its table's REPLICA IDENTITY
    was not FULL (changed behind sparksync's back). SCALL's changed columns and XCALL's before image
    cannot be made from it, so it is never delivered as a guess."""

    def __init__(self, what: str, table: str):
        super().__init__(f"{'an' if what == 'update' else 'a'} {what} of {table} arrived without its before image",
                         obj=table)
        self.what, self.table = what, table


def before_image_missing(data: bytes) -> str | None:
    """``update`` / ``delete`` when this change message carries no full before image (read from its
    tag byte, without decoding the message), else None."""
    kind = data[0]
    if kind == _UPDATE:
        return None if len(data) > 5 and data[5] == _OLD else "update"
    if kind == _DELETE:
        return None if len(data) > 5 and data[5] == _OLD else "delete"
    return None
