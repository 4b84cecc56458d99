"""The apply IR: what one atomic apply call does to the mirror, as typed operations.

The planner (plan.py) turns transactions and table actions into these; it knows nothing of Lua
or RESP. `codec.py` is the only Python code that knows the wire form the scripts read (ARGV
opcodes, shape ids, `len:value` runs); every executor (the apply script, the plain MULTI/EXEC
form, the cluster's group calls, the bulk copy, the resync scripts) consumes these objects, and
`reference.py` executes them over an in-memory keyspace, the sink's twin (docs/mirror.md, "The
apply IR").

Row operations name their table by a `TableKeys` (built once per table, shared by its rows) and
carry the decoded row images themselves: turning values into the stored text is the codec's and
the reference executor's job (service/sink/values.py), so both store the same bytes.

Immutable to the type checker (`frozen_default`); at run time a plain slots dataclass, whose
`__init__` is about three times faster than a frozen one's: a load makes one op per row change.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar, dataclass_transform

from service.binlog.rowchange import Row

__all__ = [
    "AddMember",
    "ApplyCall",
    "ApplyHeader",
    "AppendChange",
    "BeginResync",
    "CarryResync",
    "CascadeDelete",
    "CascadeUpdate",
    "ClearFkMemberships",
    "ClearRows",
    "CopyMembers",
    "DeleteFields",
    "DeleteKey",
    "DeleteRow",
    "EntryMoves",
    "FenceResync",
    "FkConstraint",
    "FkGraph",
    "JoinFkSet",
    "LeaveFkSet",
    "MergeRow",
    "MoveRow",
    "MoveRows",
    "Op",
    "RemoveMember",
    "RereadRow",
    "ResyncHeader",
    "RestartResync",
    "RowOp",
    "SetFields",
    "SkipSequence",
    "TableKeys",
    "Text",
    "UpdateChanged",
    "UpdateRow",
    "WriteRow",
]

_T = TypeVar("_T")


@dataclass_transform(frozen_default=True)
def _op(cls: type[_T]) -> type[_T]:
    return dataclass(slots=True, unsafe_hash=True)(cls)


Text = str | bytes  # a stored value or a key part, as Redis receives it


@_op
class TableKeys:
    """The keys of one mirrored table (keys.KeyLayout): row keys are `{base}:{suffix}`."""

    schema: str
    table: str
    base: str  # the row-key base
    index: str  # `__keys`: the suffixes of the table's rows
    tid: str  # the table id (`__tables` member, mark field)
    touched: str  # `__touched`: rows the stream wrote during a resync
    derive: str = ""  # a shaped table's derived entries (derive.Derivation.spec_text); "": none
    json: bool = False  # its rows are JSON documents (value_mode json, or its section's `value`)


@_op
class ApplyHeader:
    """What every apply call checks and advances (apply.lua's first 12 arguments)."""

    lease_key: str
    token: str  # the writer's lease token; "#n" on a cluster group (a fencing number); "" unfenced
    checkpoint_key: str
    expected_prev: str  # the checkpoint id the call follows (the chain check)
    progress_key: str
    txn_id: str
    chunk: int  # 0: a whole transaction (or several); k > 0: the k-th chunk of a chunked one
    final: bool  # the last chunk
    seq_key: str
    nseq: int  # change sequence numbers the call takes
    resync_key: str
    done: int  # changes of a chunked transaction applied before this chunk


@_op
class ResyncHeader:
    """What every call of a table's resync checks (lua/resync_*.lua): the lease, and that the
    table's resync is still `generation` (a statement that restarts, moves or ends it moves it)."""

    lease_key: str
    token: str
    resync_key: str
    table: TableKeys
    generation: int


# -- row operations (relative to a table; each registers its table in `__tables` once per call) --


@_op
class WriteRow:
    """Replace the row `suffix` by `row` (its NULL columns not stored, in the hash layout)."""

    table: TableKeys
    suffix: str
    row: Row


@_op
class MergeRow:
    """Merge a partial image (MINIMAL/NOBLOB) into the stored row; it is read again at the end of
    a resync in flight (`__partial`)."""

    table: TableKeys
    suffix: str
    row: Row


@_op
class UpdateRow:
    """An UPDATE with full images: only the changed values are written when the row is stored and
    its table is not being resynced; otherwise the row is replaced by `after`."""

    table: TableKeys
    suffix: str
    before: Row
    after: Row


@_op
class EntryMoves:
    """A shaped row's derived entries that an update moves, computed by the planner from its
    images (derive.entry_moves): applied when the row's stored `__derived` record is `expected`
    (else the script derives the row again from what is stored). The row's key (`member`, which
    holds the entries and, with a key template, the copy) stays."""

    member: str
    expected: str  # the record the before image implies
    record: str  # the one the after image does
    drops: tuple[tuple[str, str], ...]  # (kind, key) of entries that go
    adds: tuple[tuple[str, str, str], ...]  # (kind, key, score) of entries that come
    counts: tuple[tuple[str, int], ...]  # `__derivedcounts` field -> change


@_op
class UpdateChanged:
    """An UPDATE of a row the call first checks is stored (the whole call is refused with
    ROWS_MISSING otherwise, and planned again with UpdateRow): only the changed values travel.
    A shaped row's update that moves its entries carries them (`moves`, op UM)."""

    table: TableKeys
    suffix: str
    before: Row
    after: Row
    moves: EntryMoves | None = None


@_op
class DeleteRow:
    table: TableKeys
    suffix: str


@_op
class MoveRow:
    """The row's key changed under a partial image: the stored row moves (its other columns kept)."""

    table: TableKeys
    old: str
    new: str


@_op
class RereadRow:
    """A row written from a partial INSERT (completed from the catalog's defaults): a resync in
    flight reads it again."""

    table: TableKeys
    suffix: str


@_op
class SkipSequence:
    """A change not mirrored: it still takes its sequence number."""


@_op
class AppendChange:
    """An entry of the change-log stream (XADD MAXLEN ~), numbered by the call's sequence."""

    stream: str
    maxlen: int
    fields: tuple[tuple[str, Text], ...]


RowOp = WriteRow | MergeRow | UpdateRow | UpdateChanged | DeleteRow | MoveRow | RereadRow


# -- keys and marks --------------------------------------------------------------------------


@_op
class AddMember:
    set: str
    member: str


@_op
class RemoveMember:
    set: str
    member: str


@_op
class DeleteKey:
    key: str  # UNLINK


@_op
class SetFields:
    key: str
    fields: tuple[tuple[str, Text], ...]


@_op
class DeleteFields:
    key: str
    fields: tuple[str, ...]


@_op
class FenceResync:
    """A resync in flight writes no more rows (its mark becomes "- {reason}")."""

    tid: str


@_op
class BeginResync:
    """(Re)start a resync: a new generation, nothing touched yet (`__stale` was filled by a
    CopyMembers unit before)."""

    tid: str
    reason: str
    touched: str


@_op
class RestartResync:
    """TRUNCATE: a resync in flight starts again with nothing stale."""

    tid: str
    stale: str
    touched: str


@_op
class CarryResync:
    """RENAME: a resync in flight continues under the new name (or the new name's marks go)."""

    old_tid: str
    new_tid: str
    stale: str
    touched: str


# -- whole-table work (bounded units, recorded in `__tableops`) ------------------------------


@_op
class ClearFkMemberships:
    """The rows of the next ClearRows/MoveRows leave the sets of their foreign-key values."""

    json: bool


@_op
class ClearRows:
    """Remove up to `limit` rows of a table; the call replies the rows left."""

    record: str  # `__tableops` ("": not recorded)
    uid: str
    limit: int
    index: str
    base: str


@_op
class MoveRows:
    """Move up to `limit` rows to another name; the call replies the rows left."""

    record: str
    uid: str
    limit: int
    index: str
    base: str
    to_index: str
    to_base: str


@_op
class CopyMembers:
    """Copy `limit` members of a set (SSCAN from `cursor`, "" at first), only while table
    `if_resync` (if not "") has a resync mark; the call replies the next cursor."""

    record: str
    uid: str
    limit: int
    cursor: str
    index: str
    to: str
    if_resync: str


# -- foreign-key cascades (lua/cascade.lua) ---------------------------------------------------


@_op
class FkConstraint:
    cid: str
    parent_tid: str
    child: TableKeys
    set_prefix: str
    on_delete: str
    on_update: str
    child_fields: tuple[Text, ...]
    parent_fields: tuple[Text, ...]


@_op
class FkGraph:
    """The constraints the cascades below follow (once per call, before the first of them)."""

    resync_key: str
    json: bool
    constraints: tuple[FkConstraint, ...]


@_op
class JoinFkSet:
    set: str
    suffix: str


@_op
class LeaveFkSet:
    set: str
    suffix: str


@_op
class CascadeDelete:
    """The parent row that held referenced value `old` (`len:text` per column) was deleted."""

    cid: str
    old: bytes


@_op
class CascadeUpdate:
    """Its referenced columns became `values` (None: NULL)."""

    cid: str
    old: bytes
    values: tuple[Text | None, ...]


Op = (
    RowOp
    | SkipSequence
    | AppendChange
    | AddMember
    | RemoveMember
    | DeleteKey
    | SetFields
    | DeleteFields
    | FenceResync
    | BeginResync
    | RestartResync
    | CarryResync
    | ClearFkMemberships
    | ClearRows
    | MoveRows
    | CopyMembers
    | FkGraph
    | JoinFkSet
    | LeaveFkSet
    | CascadeDelete
    | CascadeUpdate
)


@_op
class ApplyCall:
    """One atomic apply call: its header, its ops, and the ops that end it (the checkpoint, or a
    chunk's `__progress`). `ops` is the planner's list (appended to while a call is planned)."""

    header: ApplyHeader
    ops: Sequence[Op]
    tail: Sequence[Op] = ()
