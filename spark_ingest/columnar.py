"""The columnar twin of ``EventMapping.to_event`` for the Spark job: Arrow record batches ->
typed event columns, routing targets, dead letters (``Plan.prepare``, run in ``mapInArrow``),
then per actor wire batches in ``(ts, id)`` order (``Chunker`` + ``encode_chunk``, run in the
push task). Pure pyarrow/numpy, no Spark import: the tests run it in-process.

``EventMapping.to_event`` stays the one definition of how a row becomes an event. A row the
bulk path cannot type exactly like it (a nested, decimal or binary value, an integer beyond
64 bits, a non-finite number, an event time that is not a plain number) and every row with an
error is handed to ``to_event`` itself (a "slow row"): the events, their ids and the error
messages are the reference's, only the cost differs. Text cells are typed by
``cep.io.columns.typed_column`` (the rules of ``cep.io.cells.parse_cell``, in bulk); each
attribute travels through Spark as up to four typed columns (int, float, bool, text; null
where the cell is of another kind or empty), since a Spark column has one type and CSV cells
of one column may be of several kinds.

The routing target of a row is ``actors.routing.partition_of`` of its key, computed once per
distinct key value (``dictionary_encode`` + a dict of hashes + ``take``).

Event ids are not computed here: a wire batch leaves them out and the actor derives them
when it needs them (``cep.event.derive_id``, the same function, so the same ids). The one
exception is a run of events with the same ``ts`` for one actor: ``Chunker`` orders such a
run by id (the engine's total order is ``(ts, id)``), so it derives their ids.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import msgpack
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from raycep.actors.routing import KEY_GROUPS, partition_of
from raycep.cep.errors import CepError, IngestError
from raycep.cep.event import derive_id
from raycep.cep.io.codec import encode_columns, encode_rows
from raycep.cep.io.columns import dense_union, strip_text, typed_column
from raycep.cep.io.timestamps import TS_UNITS, event_time
from raycep.cep.store.arrow import true_mask
from raycep.spark_ingest.dead_letters import dead_record
from raycep.spark_ingest.mapping import RESERVED, EventMapping

#: value kinds of a typed column (int, float, bool, text), their Arrow types and the names of
#: the children of a mixed-kind column on the wire (cep.io.columns: a dense union)
KINDS = ("i", "f", "b", "s")
KIND_TYPES = {"i": pa.int64(), "f": pa.float64(), "b": pa.bool_(), "s": pa.string()}
UNION_NAMES = {"i": "int", "f": "float", "b": "bool", "s": "str"}
_KIND_OF_CHILD = {v: k for k, v in UNION_NAMES.items()}
#: integers up to this magnitude convert to a float exactly (int / unit == float / unit)
_EXACT = 2 ** 53
#: the value categories of input columns and the kinds each gives
CATEGORY_KINDS = {"str": KINDS, "int": ("i",), "float": ("f",), "bool": ("b",),
                  "timestamp": ("f",), "date": ("s",), "other": ()}
MALFORMED_REASON = ("malformed record: Spark could not parse it (a CSV row with more or fewer "
                    "cells than the header, or a line that is not a JSON object)")

# the columns of a prepared batch besides the typed values
TARGET, PART, TS, TYPE, ID, SLOW, DEAD = "_t", "_p", "_ts", "_type", "_id", "_slow", "_dead"
#: the target of a dead row
DEAD_TARGET = -1


def category_of(arrow_type: pa.DataType) -> str:
    """How the bulk path reads an input column of ``arrow_type`` (CATEGORY_KINDS)."""
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return "str"
    if pa.types.is_integer(arrow_type) and arrow_type != pa.uint64():
        return "int"
    if pa.types.is_floating(arrow_type):
        return "float"
    if pa.types.is_boolean(arrow_type):
        return "bool"
    if pa.types.is_timestamp(arrow_type):
        return "timestamp"
    if pa.types.is_date(arrow_type):
        return "date"
    return "other"


@dataclass(frozen=True)
class Value:
    """One typed value of a row: attribute ``name`` (or the key field) from column
    ``source``; its prepared columns are ``prefix + kind``."""
    name: str
    source: str
    category: str
    prefix: str

    def kinds(self, typed: bool) -> tuple:
        if self.category == "str" and not typed:
            return ("s",)
        return CATEGORY_KINDS[self.category]

    def columns(self, typed: bool) -> list:
        return [(self.prefix + k, k) for k in self.kinds(typed)]


@dataclass
class Plan:
    """What the job does with a table of ``columns`` (data column -> category, in table
    order), built on the driver from the DataFrame's schema and shipped to the tasks.

    ``parts[t]`` is the value of PART that sends the rows of target ``t`` (partition actors
    ``0..partitions-1``, the global actor ``partitions``) to the Spark partition of the task
    that pushes them; dead rows get ``dead_part``."""
    mapping: EventMapping
    columns: dict
    partitions: int
    global_types: frozenset | None = frozenset()
    parts: tuple | None = None           # default: every target in partition 0
    key_groups: int = KEY_GROUPS
    epoch: int = 0                       # the partition layout routed for (a rescale refuses)
    dead_part: int = 0
    malformed: str | None = None
    # decided from the mapping and the columns:
    attrs: list = field(init=False, default_factory=list)         # [Value]
    key_value: Value | None = field(init=False, default=None)   # the key as a field ("key")
    key_attr: str | None = field(init=False, default=None)      # the attribute that is the key
    key_required: bool = field(init=False, default=False)
    id_source: str | None = field(init=False, default=None)
    all_slow: bool = field(init=False, default=False)   # every row: the reference path
    v2: bool = field(init=False, default=True)          # columnar wire batches (else rows)

    def __post_init__(self):
        """The names ``to_event`` gives a row's values, decided once per table."""
        m = self.mapping
        id_column = m.id_column if m.id_column is not None else "id"
        skip = {m.type_column, m.ts_column, id_column}
        if m.attributes is None:
            names = [c for c in self.columns if c not in skip]
        else:
            names = [c for c in m.attributes if c not in skip]
            if m.key_column is not None and m.key_column not in m.attributes:
                names.append(m.key_column)
        self.id_source = id_column if id_column in self.columns else None
        key_is_field = m.key_column is None or m.key_column == "key"
        for j, name in enumerate(names):
            if name in RESERVED and name not in ("key", "id"):
                self.all_slow = True            # to_event refuses every row
                continue
            if name not in self.columns:
                continue                        # row.get() is None: never an attribute
            value = Value(name, name, self.columns[name], f"_a{j}")
            if name == "key" and key_is_field:
                self.key_value = value
            else:
                self.attrs.append(value)
        if key_is_field:
            self.key_required = m.key_column == "key"
        else:
            self.key_attr = m.key_column
            self.key_required = True
            if not any(v.name == m.key_column for v in self.attrs):
                self.all_slow = True            # make_event: the key attribute is missing
        if (m.type_column is not None and m.type_column not in self.columns) or \
                m.ts_column not in self.columns:
            self.all_slow = True
        # an attribute named like a field of the wire table travels in msgpack rows
        if any(v.name in ("key", "id", "type", "ts", "attrs") for v in self.attrs):
            self.v2 = False

    # ------------------------------------------------------------------ schema
    def value_columns(self) -> list:
        """[(prepared column, kind)] of the key field and the attributes."""
        typed = self.mapping.typed_strings
        out = self.key_value.columns(typed) if self.key_value else []
        for v in self.attrs:
            out += v.columns(typed)
        return out

    def schema(self) -> pa.Schema:
        """The schema of a prepared batch."""
        fields = [pa.field(TARGET, pa.int32()), pa.field(PART, pa.int32()),
                  pa.field(TS, pa.float64()), pa.field(TYPE, pa.string())]
        if self.id_source is not None:
            fields.append(pa.field(ID, pa.string()))
        fields += [pa.field(name, KIND_TYPES[k]) for name, k in self.value_columns()]
        fields += [pa.field(SLOW, pa.binary()), pa.field(DEAD, pa.string())]
        return pa.schema(fields)

    # ------------------------------------------------------------------ prepare
    def prepare(self, batch, locate=None) -> pa.RecordBatch:
        """One input batch -> its rows as typed columns with their routing target (the
        global actor's copies appended), dead rows as JSON records in DEAD (reason, row,
        file, line, record). ``locate(i)`` gives ``(file, line, record)`` of row ``i``."""
        n = batch.num_rows
        cols = {name: batch.column(name) for name in batch.schema.names}
        slow = np.full(n, self.all_slow, dtype=bool)
        malformed = np.zeros(n, dtype=bool)
        if self.malformed is not None and self.malformed in cols:
            malformed = true_mask(pc.is_valid(cols[self.malformed]))
        typed = self.mapping.typed_strings
        out = {TYPE: self._types(cols, n, slow), TS: self._times(cols, n, slow)}
        if self.id_source is not None:
            out[ID] = _ids(cols[self.id_source], slow)
        key = None
        for v in ([self.key_value] if self.key_value else []) + self.attrs:
            kinds = _typed(cols[v.source], v.category, typed, slow)
            for name, k in v.columns(typed):
                out[name] = kinds.get(k, pa.nulls(n, KIND_TYPES[k]))
            if v is self.key_value or v.name == self.key_attr:
                key = kinds
        target = self._targets(key, n, slow)
        slow &= ~malformed
        table = pa.table(out)
        records = {}
        if malformed.any():
            raw = cols[self.malformed]
            for i in np.flatnonzero(malformed).tolist():
                records[i] = dead_record(MALFORMED_REASON, raw[i].as_py(), i, locate)
        events = {}
        if slow.any():
            rows = np.flatnonzero(slow)
            data = batch.select([c for c in self.columns if c in cols]).take(pa.array(rows))
            for i, row in zip(rows.tolist(), data.to_pylist(maps_as_pydicts="lossy")):
                try:
                    ev = self.mapping.to_event(row)
                    events[i] = (ev, partition_of(ev.key, self.partitions, self.key_groups))
                except CepError as exc:
                    records[i] = dead_record(str(exc), _jsonable(row), i, locate)
        table = _patched(table, target, events, records)
        table = self._with_globals(table)
        targets = table.column(TARGET).to_numpy()
        parts = np.asarray(self.parts or [0] * (self.partitions + 1),
                           dtype=np.int32)[np.maximum(targets, 0)]
        parts[targets == DEAD_TARGET] = self.dead_part
        table = table.append_column(PART, pa.array(parts, pa.int32()))
        schema = self.schema()
        return pa.RecordBatch.from_arrays(
            [table.column(name).combine_chunks().cast(schema.field(name).type)
             for name in schema.names], schema=schema)

    def _with_globals(self, table: pa.Table) -> pa.Table:
        """Append copies of the rows the global actor needs (target ``partitions``)."""
        wanted = self.global_types
        if wanted is not None and not wanted:
            return table
        ok = pc.greater_equal(table.column(TARGET), 0)
        if wanted is not None:
            ok = pc.and_(ok, pc.is_in(table.column(TYPE),
                                      pa.array(sorted(wanted), pa.string())))
        copies = table.filter(ok)
        if not copies.num_rows:
            return table
        copies = copies.set_column(copies.schema.get_field_index(TARGET), TARGET,
                                   pa.array(np.full(copies.num_rows, self.partitions,
                                                    dtype=np.int32)))
        return pa.concat_tables([table, copies])

    def _types(self, cols, n, slow):
        m = self.mapping
        if m.type_constant is not None:
            return pa.array([m.type_constant], pa.string()).take(np.zeros(n, dtype=np.int64))
        col = cols.get(m.type_column)
        if col is None or category_of(col.type) != "str":
            slow[:] = True                    # the reference says what is wrong
            return pa.nulls(n, pa.string())
        types = strip_text(col)
        types = pc.if_else(pc.equal(types, ""), pa.scalar(None, pa.string()), types)
        slow |= true_mask(pc.is_null(types))
        return types

    def _times(self, cols, n, slow):
        """Event times as floats; a value the bulk path does not read like the reference is
        null here and its row slow."""
        m = self.mapping
        col = cols.get(m.ts_column)
        if col is None:
            slow[:] = True
            return pa.nulls(n, pa.float64())
        cat, unit = category_of(col.type), m.ts_unit
        if cat == "timestamp":
            ts = _epoch_seconds(col)
        elif cat == "date":
            days = pc.cast(pc.cast(col, pa.date32()), pa.int32())
            ts = pc.multiply(pc.cast(days, pa.float64()), 86400.0)
        elif unit not in TS_UNITS:
            if cat != "str":
                slow[:] = True
                return pa.nulls(n, pa.float64())
            ts = pa.array([_reference_ts(m, v) for v in col.to_pylist()], pa.float64())
        elif cat == "str":
            # _number: integral text -> int, else float(); both then divided by the unit
            typed = typed_column(pc.cast(col, pa.string()), empty_absent=False)
            kinds = _kinds(typed, np.zeros(n, dtype=bool))
            ints, floats = kinds.get("i"), kinds.get("f")
            ts = pa.nulls(n, pa.float64())
            if ints is not None:
                ts = pc.coalesce(_int_seconds(ints, TS_UNITS[unit]), ts)
            if floats is not None:
                ts = pc.coalesce(pc.divide(floats, float(TS_UNITS[unit])), ts)
        elif cat == "int":
            ts = _int_seconds(pc.cast(col, pa.int64()), TS_UNITS[unit])
        elif cat == "float":
            ts = pc.divide(pc.cast(col, pa.float64()), float(TS_UNITS[unit]))
        else:
            slow[:] = True
            return pa.nulls(n, pa.float64())
        ts = pc.if_else(pc.fill_null(pc.is_finite(ts), False), ts,
                        pa.scalar(None, pa.float64()))
        slow |= true_mask(pc.is_null(ts))
        return ts

    def _targets(self, key, n, slow) -> np.ndarray:
        """The partition of each row's key (GLOBAL_PARTITION 0 without a key); a row
        without the key it needs is slow (the reference names the error)."""
        target = np.zeros(n, dtype=np.int32)
        if key is None:
            if self.key_required:
                slow[:] = True
            return target
        present = np.zeros(n, dtype=bool)
        for col in key.values():
            valid = true_mask(pc.is_valid(col))
            if not valid.any():
                continue
            present |= valid
            enc = pc.dictionary_encode(col)
            hashes = np.array([_partition(v, self.partitions, self.key_groups)
                               for v in enc.dictionary.to_pylist()] or [0], dtype=np.int32)
            codes = enc.indices.fill_null(0).to_numpy()
            target[valid] = hashes[codes[valid]]
            slow |= valid & (target < 0)       # a key partition_of refuses: the reference
            target[target < 0] = 0             # names the error
        if self.key_required:
            slow |= ~present
        return target

    def retarget(self, table: pa.Table, partitions: int) -> pa.Table | None:
        """A prepared table's rows routed for ``partitions`` partition actors (the cluster
        was re-partitioned): each row by its key's group, the global actor's copies (target
        ``self.partitions``) to the global actor (target ``partitions``), dead rows dead.
        None when a row is slow (its key is in its wire row: the caller stops instead)."""
        n = table.num_rows
        if table.column(SLOW).null_count != n:
            return None
        old = table.column(TARGET).to_numpy()
        typed = self.mapping.typed_strings
        key = None
        for v in ([self.key_value] if self.key_value else []) + self.attrs:
            if v is self.key_value or v.name == self.key_attr:
                key = {k: table.column(name).combine_chunks() for name, k in v.columns(typed)}
        moved = Plan(self.mapping, self.columns, partitions, self.global_types,
                     key_groups=self.key_groups)
        new = moved._targets(key, n, np.zeros(n, dtype=bool))
        new[old == self.partitions] = partitions
        new[old == DEAD_TARGET] = DEAD_TARGET
        return table.set_column(table.schema.get_field_index(TARGET), TARGET,
                                pa.array(new, pa.int32()))

    # ------------------------------------------------------------------ wire
    def rows(self, table: pa.Table) -> list:
        """Wire rows ``[type, ts, attrs, key, id]`` of a prepared table (the msgpack
        batch form; id None: derived by the receiver)."""
        n = table.num_rows
        types = table.column(TYPE).to_pylist()
        ts = table.column(TS).to_pylist()
        ids = table.column(ID).to_pylist() if self.id_source is not None else [None] * n
        slow = table.column(SLOW).to_pylist()
        attrs = [{} for _ in range(n)]
        key = [None] * n
        typed = self.mapping.typed_strings
        for v in ([self.key_value] if self.key_value else []) + self.attrs:
            values = [None] * n
            for name, _ in v.columns(typed):
                col = table.column(name)
                if col.null_count == n:
                    continue
                for i, x in enumerate(col.to_pylist()):
                    if x is not None:
                        values[i] = x
            if v is self.key_value:
                key = values
                continue
            for i, x in enumerate(values):
                if x is not None:
                    attrs[i][v.name] = x
            if v.name == self.key_attr:
                key = values
        out = []
        for i in range(n):
            if slow[i] is not None:
                out.append(msgpack.unpackb(slow[i], raw=False, strict_map_key=False))
            else:
                out.append([types[i], ts[i], attrs[i], key[i], ids[i]])
        return out

    def columns_of(self, table: pa.Table) -> pa.Table | None:
        """The wire table (cep.io.columns: type, ts, key, id, one column per attribute) of a
        prepared table, or None when it has slow rows or an attribute named like a field
        (then it travels as msgpack rows)."""
        if not self.v2 or table.column(SLOW).null_count != table.num_rows:
            return None
        typed = self.mapping.typed_strings
        names, arrays = ["type", "ts"], [table.column(TYPE), table.column(TS)]
        key = None
        for v in ([self.key_value] if self.key_value else []) + self.attrs:
            column = _merged([(k, table.column(name)) for name, k in v.columns(typed)],
                             table.num_rows)
            if v is self.key_value or v.name == self.key_attr:
                key = column
            if v is not self.key_value and column is not None:
                names.append(v.name)
                arrays.append(column)
        if key is not None:
            names.append("key")
            arrays.append(key)
        if self.id_source is not None and table.column(ID).null_count != table.num_rows:
            names.append("id")
            arrays.append(table.column(ID))
        return pa.Table.from_arrays([a.combine_chunks() if isinstance(a, pa.ChunkedArray)
                                     else a for a in arrays], names=names)

    def order_ties(self, table: pa.Table) -> pa.Table:
        """``table`` (one actor's rows, sorted by ts) with every run of equal ts ordered by
        event id, as the engine orders events: ``(ts, id)``."""
        ts = table.column(TS).to_numpy()
        if len(ts) < 2:
            return table
        same = ts[1:] == ts[:-1]
        if not same.any():
            return table
        tie = np.zeros(len(ts), dtype=bool)
        tie[1:] |= same
        tie[:-1] |= same
        rows = np.flatnonzero(tie)
        wire = self.rows(table.take(pa.array(rows)))
        ids = [r[4] if len(r) > 4 and r[4] is not None else
               derive_id(r[0], float(r[1]), r[3] if len(r) > 3 else None, r[2] or {})
               for r in wire]
        order = np.arange(len(ts))
        start = 0
        while start < len(rows):                 # each run: its rows sorted by id
            end = start + 1
            while end < len(rows) and rows[end] == rows[end - 1] + 1 and \
                    ts[rows[end]] == ts[rows[start]]:
                end += 1
            run = sorted(range(start, end), key=lambda j: ids[j])
            order[rows[start:end]] = rows[run]
            start = end
        return table.take(pa.array(order))


def encode_chunk(plan: Plan, table: pa.Table, source: str, batch_id: str) -> bytes:
    """One wire batch of a prepared table: columnar (schema version 2) unless it holds a
    slow row or an attribute named like a wire field, then msgpack rows (version 1)."""
    columns = plan.columns_of(table)
    if columns is not None:
        return encode_columns(columns, source, batch_id)
    return encode_rows(plan.rows(table), source, batch_id)


class Chunker:
    """The push side: prepared batches (one Spark partition, sorted by ts) -> per target,
    chunks of ``size`` rows in ``(ts, id)`` order. A run of equal ts is never cut, so the
    chunks are the same whatever the Arrow batch boundaries (a retried task resends the
    same batches)."""

    def __init__(self, plan: Plan, size: int):
        self.plan, self.size = plan, max(1, size)
        self.pending: dict = {}              # target -> [tables]
        self.counts: dict = {}               # target -> pending rows

    def add(self, batch) -> tuple:
        """``(dead records, [(target, chunk)])`` of one prepared batch."""
        table = pa.Table.from_batches([batch]) if isinstance(batch, pa.RecordBatch) else batch
        targets = table.column(TARGET)
        dead = table.filter(pc.equal(targets, DEAD_TARGET)).column(DEAD).to_pylist()
        out = []
        if len(dead) == table.num_rows:
            return dead, out
        enc = pc.dictionary_encode(targets.combine_chunks())
        for code, t in enumerate(enc.dictionary.to_pylist()):
            if t == DEAD_TARGET:
                continue
            rows = table.filter(pc.equal(enc.indices, code))
            self.pending.setdefault(t, []).append(rows)
            self.counts[t] = self.counts.get(t, 0) + rows.num_rows
            if self.counts[t] > self.size:
                out.extend(self._cut(t, final=False))
        return dead, out

    def flush(self) -> list:
        out = []
        for t in list(self.pending):
            out.extend(self._cut(t, final=True))
        return out

    def release(self, before: float) -> list:
        """Chunks of every held row with a time before ``before`` (the rows at ``before``
        and after stay). The push task releases after each batch up to the batch's latest
        time, so that no actor's rows are held back behind another's (re-partitioning:
        spark_ingest.push); a run of equal times is still never cut."""
        out = []
        for t in list(self.pending):
            table = pa.concat_tables(self.pending.pop(t))
            k = int(np.searchsorted(table.column(TS).to_numpy(), before, side="left"))
            if k:
                self.pending[t] = [table.slice(0, k)]
                out.extend(self._cut(t, final=True))
            if k < table.num_rows:
                self.pending[t] = [table.slice(k)]
            self.counts[t] = table.num_rows - k
        return out

    def _cut(self, t, final: bool) -> list:
        table = pa.concat_tables(self.pending.pop(t))
        out = []
        ts = table.column(TS).to_numpy()
        start, n = 0, table.num_rows
        while n - start > self.size or (final and start < n):
            end = start + self.size
            while end < n and ts[end] == ts[end - 1]:
                end += 1
            if end >= n and not final:
                break                             # the run may go on in the next batch
            end = min(end, n)
            out.append((t, self.plan.order_ties(table.slice(start, end - start))))
            start = end
        if start < n:
            self.pending[t] = [table.slice(start)]
            self.counts[t] = n - start
        else:
            self.counts[t] = 0
        return out


# --------------------------------------------------------------------------- helpers

def _patched(table: pa.Table, target: np.ndarray, events: dict, records: dict) -> pa.Table:
    """``table`` with its TARGET column, the slow rows' events (their wire row in SLOW) and
    the dead rows' records (DEAD, target -1)."""
    n = table.num_rows
    if not events and not records:
        return table.append_column(TARGET, pa.array(target, pa.int32())) \
            .append_column(SLOW, pa.nulls(n, pa.binary())) \
            .append_column(DEAD, pa.nulls(n, pa.string()))
    target = target.copy()
    slow, dead = [None] * n, [None] * n
    ts, types = table.column(TS).to_pylist(), table.column(TYPE).to_pylist()
    for i, (ev, t) in events.items():
        slow[i] = msgpack.packb([ev.type, ev.ts, ev.attrs, ev.key, ev._id], use_bin_type=True)
        target[i], ts[i], types[i] = t, ev.ts, ev.type
    for i, record in records.items():
        dead[i] = record
        target[i], ts[i], types[i] = DEAD_TARGET, None, None
    table = table.set_column(table.schema.get_field_index(TS), TS, pa.array(ts, pa.float64()))
    table = table.set_column(table.schema.get_field_index(TYPE), TYPE,
                             pa.array(types, pa.string()))
    return table.append_column(TARGET, pa.array(target, pa.int32())) \
        .append_column(SLOW, pa.array(slow, pa.binary())) \
        .append_column(DEAD, pa.array(dead, pa.string()))


def _typed(col, category: str, typed: bool, slow) -> dict:
    """kind -> Arrow array (null where the value is of another kind or absent); a value
    the bulk path cannot give exactly as the reference does makes its row slow."""
    if category == "str":
        col = pc.cast(col, pa.string())
        if not typed:
            return {"s": col}
        return _typed_text(col, slow)
    if category == "int":
        return {"i": pc.cast(col, pa.int64())}
    if category == "float":
        return _kinds(pc.cast(col, pa.float64()), slow)
    if category == "bool":
        return {"b": col}
    if category == "timestamp":
        seconds = _epoch_seconds(col)
        slow |= true_mask(pc.and_(pc.is_valid(col), pc.is_null(seconds)))    # beyond 2**53 us
        return {"f": seconds}
    if category == "date":
        return {"s": pa.array([None if d is None else d.isoformat() for d in col.to_pylist()],
                              pa.string())}
    slow |= true_mask(pc.is_valid(col))               # nested, decimal, ...: the reference
    return {}


def _typed_text(col, slow) -> dict:
    """``_kinds(typed_column(col))``; a column of few distinct values (a type, a symbol) is
    typed once per distinct value (``typed_column`` types each cell on its own)."""
    n = len(col)
    if n >= 64:
        enc = pc.dictionary_encode(col)
        values = enc.dictionary
        if len(values) * 4 <= n:
            once = np.zeros(len(values), dtype=bool)
            kinds = _kinds(typed_column(values, empty_absent=False), once)
            if once.any():
                codes = enc.indices.fill_null(0).to_numpy()
                slow |= once[codes] & true_mask(pc.is_valid(enc.indices))
            return {k: v.take(enc.indices) for k, v in kinds.items()}
    return _kinds(typed_column(col, empty_absent=False), slow)


def _kinds(arr, slow) -> dict:
    """A typed column (plain, or cep.io.columns' dense union of kinds) split into one array per
    kind; values of other kinds (beyond 64 bits, ...) and non-finite floats make the row
    slow."""
    n = len(arr)
    if not pa.types.is_union(arr.type):
        kind = {pa.int64(): "i", pa.float64(): "f", pa.bool_(): "b",
                pa.string(): "s"}.get(arr.type)
        if kind is None:
            if not pa.types.is_null(arr.type):
                slow |= true_mask(pc.is_valid(arr))
            return {}
        if kind == "f":
            slow |= true_mask(pc.invert(pc.fill_null(pc.is_finite(arr), True)))
        return {kind: arr}
    codes = np.frombuffer(arr.buffers()[1], dtype=np.int8)[arr.offset:arr.offset + n]
    offsets = np.frombuffer(arr.buffers()[2], dtype=np.int32)[arr.offset:arr.offset + n]
    out = {}
    for index, code in enumerate(arr.type.type_codes):
        name = arr.type.field(index).name
        rows = codes == code
        if not rows.any() or name == "absent":
            continue
        kind = _KIND_OF_CHILD.get(name)
        if kind is None:
            slow |= rows
            continue
        where = np.where(rows, offsets, -1)
        child = arr.field(index).take(pa.array(where, mask=~rows))
        out.update({k: v for k, v in _kinds(child, slow).items()})
    return out


def _merged(columns: list, n: int):
    """One wire column from per-kind columns: the plain column when one kind has values,
    a dense union (children named as cep.io.columns names them) when several do; None when
    none has."""
    present = [(k, c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c)
               for k, c in columns if c.null_count != len(c)]
    if not present:
        return None
    if len(present) == 1:
        return present[0][1]
    codes = np.full(n, len(present), dtype=np.int8)
    offsets = np.zeros(n, dtype=np.int32)
    children, names = [], []
    for code, (k, col) in enumerate(present):
        rows = np.flatnonzero(true_mask(pc.is_valid(col)))
        codes[rows] = code
        offsets[rows] = np.arange(len(rows), dtype=np.int32)
        children.append(col.take(pa.array(rows)))
        names.append(UNION_NAMES[k])
    return dense_union(codes, offsets, children, names, len(present))


def _ids(col, slow):
    """The event id column as the reference reads it (stripped text; a number as text)."""
    cat = category_of(col.type)
    if cat == "str":
        return strip_text(pc.cast(col, pa.string()))
    if cat == "int":
        return pc.cast(pc.cast(col, pa.int64()), pa.string())
    out = []
    for i, v in enumerate(col.to_pylist()):
        if v is None or isinstance(v, (bool, float)):
            out.append(None if v is None else str(v))
        else:
            slow[i] = True
            out.append(None)
    return pa.array(out, pa.string())


def _int_seconds(ints, unit: int):
    """int / unit as Python divides (correctly rounded): exact in float64 up to 2**53;
    larger magnitudes are null here (the row is slow)."""
    small = pc.less_equal(pc.abs(ints), _EXACT)
    return pc.if_else(small, pc.divide(pc.cast(ints, pa.float64(), safe=False), float(unit)),
                      pa.scalar(None, pa.float64()))


def _epoch_seconds(col):
    """Timestamps -> float seconds since the epoch as ``datetime.timestamp()`` gives them:
    microseconds / 10**6, correctly rounded (exact in float64 below 2**53 us)."""
    micros = pc.cast(pc.cast(col, pa.timestamp("us", tz=col.type.tz)), pa.int64())
    return _int_seconds(micros, 1_000_000)


def _reference_ts(mapping: EventMapping, value):
    try:
        return event_time(value, mapping.ts_unit)
    except IngestError:
        return None


_HASHES: dict = {}


def _partition(key, n: int, key_groups: int) -> int:
    """partition_of, remembered per key in this worker (keys repeat across batches); -1 for
    a key it refuses (an integral float beyond 64 bits)."""
    memo = (key.__class__, key, n, key_groups)
    found = _HASHES.get(memo)
    if found is not None:
        return found
    if len(_HASHES) > 200_000:
        _HASHES.clear()
    try:
        found = partition_of(key, n, key_groups)
    except IngestError:
        found = -1
    _HASHES[memo] = found
    return found


def _jsonable(data: dict) -> dict:
    return {k: (v if isinstance(v, (str, int, float, bool, type(None))) else str(v))
            for k, v in data.items()}
