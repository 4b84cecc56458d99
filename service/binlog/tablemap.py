"""TABLE_MAP_EVENT -> TableSchema, including every optional-metadata TLV
(Table_map_log_event::Optional_metadata_field_type in MySQL 8 / MariaDB 10.5+)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from service.binlog.charsets import codec_for_collation, decode_latin1
from service.binlog.constants import HEADER_LEN
from service.binlog.constants import ColumnType as T
from service.binlog.fde import StreamFormat
from service.binlog.reader import ByteReader
from service.binlog.schema import Column, TableSchema
from service.errors import InvalidValue

__all__ = ["parse_table_map"]

# Optional metadata field types
SIGNEDNESS = 1
DEFAULT_CHARSET = 2
COLUMN_CHARSET = 3
COLUMN_NAME = 4
SET_STR_VALUE = 5
ENUM_STR_VALUE = 6
GEOMETRY_TYPE = 7
SIMPLE_PRIMARY_KEY = 8
PRIMARY_KEY_WITH_PREFIX = 9
ENUM_AND_SET_DEFAULT_CHARSET = 10
ENUM_AND_SET_COLUMN_CHARSET = 11
COLUMN_VISIBILITY = 12
VECTOR_DIMENSIONALITY = 13

_ONE_BYTE_META = {
    T.FLOAT, T.DOUBLE, T.BLOB, T.TINY_BLOB, T.MEDIUM_BLOB, T.LONG_BLOB, T.GEOMETRY, T.JSON,
    T.TIMESTAMP2, T.DATETIME2, T.TIME2, T.VECTOR, T.BLOB_COMPRESSED,
}  # fmt: skip
_NUMERIC = {T.TINY, T.SHORT, T.INT24, T.LONG, T.LONGLONG, T.NEWDECIMAL, T.FLOAT, T.DOUBLE}
# VECTOR counts as a (binary) character column in MySQL 9's charset metadata, MariaDB's COMPRESSED
# columns in MariaDB's.
_CHARACTER = {
    T.STRING, T.VAR_STRING, T.VARCHAR, T.BLOB, T.TINY_BLOB, T.MEDIUM_BLOB, T.LONG_BLOB, T.VECTOR,
    T.VARCHAR_COMPRESSED, T.BLOB_COMPRESSED,
}  # fmt: skip


@dataclass(slots=True)
class _Meta:
    signed: list[bool] | None = None
    default_charset: int | None = None
    charset_pairs: dict[int, int] = field(default_factory=dict)
    column_charsets: list[int] | None = None
    names: list[str] | None = None
    set_values: list[tuple[bytes, ...]] | None = None
    enum_values: list[tuple[bytes, ...]] | None = None
    geometry: list[int] | None = None
    pk: list[int] | None = None
    pk_prefix: list[int] | None = None
    es_default_charset: int | None = None
    es_charset_pairs: dict[int, int] = field(default_factory=dict)
    es_column_charsets: list[int] | None = None
    visibility: list[bool] | None = None
    vector_dims: list[int] | None = None


def _type_code(code: int) -> T:
    try:
        return T(code)
    except ValueError:
        raise InvalidValue(f"TABLE_MAP names unknown column type {code}") from None


def _read_meta(r: ByteReader, t: T) -> int:
    if t in _ONE_BYTE_META:
        return r.u8()
    if t in (T.VARCHAR, T.VAR_STRING, T.VARCHAR_COMPRESSED):
        return r.uint(2)
    if t in (T.STRING, T.ENUM, T.SET, T.NEWDECIMAL):
        hi = r.u8()
        return hi << 8 | r.u8()
    if t == T.BIT:
        return r.uint(2)
    return 0


def _resolve_string(t: T, meta: int) -> tuple[T, int]:
    """STRING metadata packs the real type and the byte length (Field_string::do_save_field_metadata)."""
    if t != T.STRING:
        return t, 0
    byte0, byte1 = meta >> 8, meta & 0xFF
    if byte0 == 0:  # no metadata (very old servers)
        return T.STRING, byte1
    if (byte0 & 0x30) != 0x30:
        return _type_code(byte0 | 0x30), byte1 | (((byte0 & 0x30) ^ 0x30) << 4)
    return _type_code(byte0), byte1


def _bits_msb_first(raw: bytes) -> list[bool]:
    return [bool(b & (0x80 >> i)) for b in raw for i in range(8)]


def _str_lists(r: ByteReader) -> list[tuple[bytes, ...]]:
    out: list[tuple[bytes, ...]] = []
    while not r.at_end():
        count = r.lenenc()
        if count > r.remaining():
            raise InvalidValue(f"{count} ENUM/SET members in {r.remaining()} bytes")
        out.append(tuple(r.lenenc_bytes() for _ in range(count)))
    return out


def _utf8(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


def _packed_list(r: ByteReader) -> list[int]:
    out: list[int] = []
    while not r.at_end():
        out.append(r.lenenc())
    return out


def _charset_pairs(r: ByteReader) -> tuple[int, dict[int, int]]:
    default = r.lenenc()
    pairs: dict[int, int] = {}
    while not r.at_end():
        idx = r.lenenc()
        pairs[idx] = r.lenenc()
    return default, pairs


def _parse_optional(r: ByteReader) -> _Meta:
    m = _Meta()
    while not r.at_end():
        kind = r.u8()
        length = r.lenenc()
        start = r.pos
        r.skip(length)
        v = ByteReader(r.buf, start, start + length, base=r.base)
        if kind == SIGNEDNESS:
            m.signed = _bits_msb_first(v.rest())
        elif kind == DEFAULT_CHARSET:
            m.default_charset, m.charset_pairs = _charset_pairs(v)
        elif kind == COLUMN_CHARSET:
            m.column_charsets = _packed_list(v)
        elif kind == COLUMN_NAME:
            m.names = []
            while not v.at_end():
                m.names.append(_utf8(v.lenenc_bytes()))
        elif kind == SET_STR_VALUE:
            m.set_values = _str_lists(v)
        elif kind == ENUM_STR_VALUE:
            m.enum_values = _str_lists(v)
        elif kind == GEOMETRY_TYPE:
            m.geometry = _packed_list(v)
        elif kind == SIMPLE_PRIMARY_KEY:
            m.pk = _packed_list(v)
        elif kind == PRIMARY_KEY_WITH_PREFIX:
            flat = _packed_list(v)
            m.pk, m.pk_prefix = flat[0::2], flat[1::2]
        elif kind == ENUM_AND_SET_DEFAULT_CHARSET:
            m.es_default_charset, m.es_charset_pairs = _charset_pairs(v)
        elif kind == ENUM_AND_SET_COLUMN_CHARSET:
            m.es_column_charsets = _packed_list(v)
        elif kind == COLUMN_VISIBILITY:
            m.visibility = _bits_msb_first(v.rest())
        elif kind == VECTOR_DIMENSIONALITY:
            m.vector_dims = _packed_list(v)
        # unknown TLV types are skipped by length
    return m


def _nth(values: Sequence[object] | None, i: int) -> object:
    return values[i] if values is not None and i < len(values) else None


def _charsets(
    ncols: int, default: int | None, pairs: dict[int, int], per_col: list[int] | None
) -> list[int | None]:
    if per_col is not None:
        return [per_col[i] if i < len(per_col) else None for i in range(ncols)]
    if default is None:
        return [None] * ncols
    return [pairs.get(i, default) for i in range(ncols)]


def parse_table_map(
    body: bytes,
    fmt: StreamFormat,
    column_names: Callable[[TableSchema], Sequence[str] | None] | None = None,
    column_charsets: Callable[[TableSchema], Sequence[int | None] | None] | None = None,
    column_members: Callable[[TableSchema], Sequence[tuple[str, ...] | None] | None] | None = None,
) -> TableSchema:
    r = ByteReader(body, base=HEADER_LEN)
    table_id = r.uint(fmt.table_id_width)
    flags = r.uint(2)
    post = fmt.post_header_len(19, 8)
    if post > fmt.table_id_width + 2:
        r.skip(post - fmt.table_id_width - 2)
    schema = r.take(r.u8()).decode("utf-8", "replace")
    r.skip(1)
    table = r.take(r.u8()).decode("utf-8", "replace")
    r.skip(1)
    ncols = r.lenenc()
    codes = r.take(ncols)
    meta_len = r.lenenc()
    mr = ByteReader(r.buf, r.pos, r.pos + meta_len, base=r.base)
    r.skip(meta_len)
    raw_types = [_type_code(c) for c in codes]
    metas = [_read_meta(mr, t) for t in raw_types]
    nullable_bits = r.bitmap(ncols)
    opt = _parse_optional(ByteReader(r.buf, r.pos, r.end, base=r.base))

    real: list[T] = []
    lengths: list[int] = []
    for t, meta in zip(raw_types, metas, strict=True):
        rt, length = _resolve_string(t, meta)
        real.append(rt)
        if rt in (T.ENUM, T.SET):
            length = meta & 0xFF
        elif rt in (T.VARCHAR, T.VAR_STRING, T.VARCHAR_COMPRESSED):
            length = meta
        elif rt in (
            T.BLOB, T.TINY_BLOB, T.MEDIUM_BLOB, T.LONG_BLOB, T.JSON, T.GEOMETRY, T.VECTOR, T.BLOB_COMPRESSED,
        ):  # fmt: skip
            length = meta
        lengths.append(length)

    numeric = [i for i, t in enumerate(real) if t in _NUMERIC]
    character = [i for i, t in enumerate(real) if t in _CHARACTER]
    enum_set = [i for i, t in enumerate(real) if t in (T.ENUM, T.SET)]
    enums = [i for i, t in enumerate(real) if t == T.ENUM]
    sets = [i for i, t in enumerate(real) if t == T.SET]
    geoms = [i for i, t in enumerate(real) if t == T.GEOMETRY]
    vectors = [i for i, t in enumerate(real) if t == T.VECTOR]

    unsigned = [False] * ncols
    if opt.signed is not None:
        for k, i in enumerate(numeric):
            unsigned[i] = bool(_nth(opt.signed, k))
    charset: list[int | None] = [None] * ncols
    for k, cs in enumerate(
        _charsets(len(character), opt.default_charset, opt.charset_pairs, opt.column_charsets)
    ):
        charset[character[k]] = cs
    es_cs = _charsets(len(enum_set), opt.es_default_charset, opt.es_charset_pairs, opt.es_column_charsets)
    for k, cs in enumerate(es_cs):
        charset[enum_set[k]] = cs

    def member_decoder(col: int) -> Callable[[bytes], str]:
        codec = codec_for_collation(charset[col])
        if codec == "latin1":
            return decode_latin1
        if codec is None or codec in ("binary", "utf-8"):
            return _utf8
        name: str = codec
        return lambda raw: raw.decode(name, "replace")

    enum_values: dict[int, tuple[str, ...]] = {}
    set_values: dict[int, tuple[str, ...]] = {}
    if opt.enum_values is not None:
        for k, i in enumerate(enums[: len(opt.enum_values)]):
            dec = member_decoder(i)
            enum_values[i] = tuple(dec(b) for b in opt.enum_values[k])
    if opt.set_values is not None:
        for k, i in enumerate(sets[: len(opt.set_values)]):
            dec = member_decoder(i)
            set_values[i] = tuple(dec(b) for b in opt.set_values[k])

    names = opt.names if opt.names is not None and len(opt.names) == ncols else None
    columns = [
        Column(
            index=i,
            name=names[i] if names is not None else f"@{i + 1}",
            type=real[i],
            meta=metas[i],
            nullable=bool(nullable_bits >> i & 1),
            unsigned=unsigned[i],
            charset=charset[i],
            enum_values=enum_values.get(i),
            set_values=set_values.get(i),
            geometry_type=_geom(opt.geometry, geoms, i),
            visible=bool(_nth(opt.visibility, i)) if opt.visibility is not None else True,
            binlog_type=raw_types[i] if raw_types[i] != real[i] else None,
            max_length=lengths[i],
            vector_dimension=_geom(opt.vector_dims, vectors, i),
        )
        for i in range(ncols)
    ]
    pk = tuple(opt.pk or ())
    if any(not 0 <= i < ncols for i in pk):
        raise InvalidValue(f"primary key names a column outside 0..{ncols - 1}")
    result = TableSchema(
        table_id=table_id,
        schema=schema,
        table=table,
        columns=tuple(columns),
        primary_key=pk,
        primary_key_prefixes=tuple(opt.pk_prefix or ()),
        flags=flags,
        has_names=names is not None,
    )
    if names is None and column_names is not None:
        supplied = column_names(result)
        if supplied is not None and len(supplied) == ncols:
            result = _renamed(result, supplied)
    if column_charsets is not None and any(charset[i] is None for i in character):
        supplied_cs = column_charsets(result)
        if supplied_cs is not None and len(supplied_cs) == ncols:
            result = _with_charsets(result, character, supplied_cs)
    lacking = (opt.enum_values is None and enums) or (opt.set_values is None and sets)
    if column_members is not None and lacking:
        supplied_m = column_members(result)
        if supplied_m is not None and len(supplied_m) == ncols:
            result = _with_members(result, supplied_m)
    return result


def _geom(values: list[int] | None, positions: list[int], i: int) -> int | None:
    if values is None or i not in positions:
        return None
    k = positions.index(i)
    return values[k] if k < len(values) else None


def _with_charsets(schema: TableSchema, character: list[int], charsets: Sequence[int | None]) -> TableSchema:
    """The character columns the TABLE_MAP left without a charset get the supplied one."""
    from dataclasses import replace

    cols = list(schema.columns)
    for i in character:
        if cols[i].charset is None and charsets[i] is not None:
            cols[i] = replace(cols[i], charset=charsets[i])
    return replace(schema, columns=tuple(cols))


def _with_members(schema: TableSchema, members: Sequence[tuple[str, ...] | None]) -> TableSchema:
    """ENUM and SET columns the TABLE_MAP left without values get the supplied ones."""
    from dataclasses import replace

    cols = list(schema.columns)
    for i, col in enumerate(cols):
        values = members[i]
        if values is None:
            continue
        if col.type == T.ENUM and col.enum_values is None:
            cols[i] = replace(col, enum_values=tuple(values))
        elif col.type == T.SET and col.set_values is None:
            cols[i] = replace(col, set_values=tuple(values))
    return replace(schema, columns=tuple(cols))


def _renamed(schema: TableSchema, names: Sequence[str]) -> TableSchema:
    from dataclasses import replace

    cols = tuple(replace(c, name=str(n)) for c, n in zip(schema.columns, names, strict=True))
    return replace(schema, columns=cols, has_names=True)
