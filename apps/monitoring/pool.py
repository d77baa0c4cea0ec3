"""Connection-pool history packed: one PoolSnapshot row per poll (or rollup bucket) of a ProxySQL node,
every server of its stats_mysql_connection_pool in one compact binary value.

One row per pool row cost ~140-215 bytes a row (row header, node, time, hostgroup, host name, port and
seven 8-byte floats, indexes) and was 90 % of the history. Packed, a server costs ~20 bytes at a poll:
the server is a PoolServer id (the host name is stored once per node), the status a severity code, whole
numbers a varint, the others a 4-byte float (7 significant digits; the charts show 4), None and zero
almost nothing. A rollup bucket keeps for every figure its average, minimum and maximum (an extreme
equal to the average costs nothing) and the worst status of the bucket.

Format: one byte (RAW_V1 or ROLLUP_V1), varint count, then per server: varint server id, status code,
2-bit tags for the values (0 None, 1 varint, 2 float32, 3 same as the average), the values. When raw
deflate makes it shorter (servers alike, idle ones: ~20-25 % in the lab), the part after the first byte
is deflated and the first byte says so (DEFLATED | kind).
"""

import struct
import zlib
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from .models import POOL_STATUS_SEVERITY, RAW, PoolServer, PoolSnapshot, worst_status

FIELDS = ("conn_used", "conn_free", "conn_err_ps", "queries_ps", "bytes_sent_ps", "bytes_recv_ps", "latency_us")
EXTREMES = tuple(f"{f}_{end}" for f in FIELDS for end in ("min", "max"))
RAW_V1, ROLLUP_V1 = 1, 2
DEFLATED = 0x80
UNKNOWN = "UNKNOWN"  # a status ProxySQL 2.7 does not have; ranks worst
STATUS_CODE = {s: i for i, s in enumerate(POOL_STATUS_SEVERITY)}
STATUSES = POOL_STATUS_SEVERITY + (UNKNOWN,)
_F32 = struct.Struct("<f")
_MAX_VARINT = 1 << 53

Figure = int | float | None
Figures = Mapping[str, Figure]  # {field: value}; a rollup's also <field>_min / <field>_max
Entry = tuple[int, str, Figures]  # (server id, status, figures): what pack() takes
Packed = bytes | memoryview  # a snapshot's bytes (the database may hand a BinaryField back as a memoryview)
ServerKey = tuple[int, str, int]  # (hostgroup, host, port)


def severity(status: str) -> int:
    return STATUS_CODE.get(status, len(POOL_STATUS_SEVERITY))


def _varint(out: bytearray, n: int) -> None:
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _read_varint(data: bytes, i: int) -> tuple[int, int]:
    n = shift = 0
    while True:
        b = data[i]
        i += 1
        n |= (b & 0x7F) << shift
        if b < 0x80:
            return n, i
        shift += 7


def _value(out: bytearray, tags: list[int], v: Figure, avg: Figure = None, rollup_extreme: bool = False) -> None:
    if v is None:
        tags.append(0)
    elif rollup_extreme and v == avg:
        tags.append(3)
    elif 0 <= v < _MAX_VARINT and v == int(v):
        tags.append(1)
        _varint(out, int(v))
    else:
        tags.append(2)
        out += _F32.pack(v)


def _tag_bytes(tags: list[int]) -> bytes:
    """2-bit tags, four to a byte."""
    tags = tags + [0] * (-len(tags) % 4)
    return bytes(tags[i] | tags[i + 1] << 2 | tags[i + 2] << 4 | tags[i + 3] << 6 for i in range(0, len(tags), 4))


def pack(entries: Sequence[Entry], rollup: bool = False) -> bytes:
    """entries: [(server id, status, {field: value})] (a rollup's dicts also hold <field>_min / _max)."""
    out = bytearray([ROLLUP_V1 if rollup else RAW_V1])
    _varint(out, len(entries))
    for server_id, status, values in entries:
        _varint(out, server_id)
        out.append(severity(status))
        body, tags = bytearray(), list[int]()
        for f in FIELDS:
            avg = values.get(f)
            _value(body, tags, avg)
            if rollup:
                _value(body, tags, values.get(f"{f}_min", avg), avg, True)
                _value(body, tags, values.get(f"{f}_max", avg), avg, True)
        out += _tag_bytes(tags)
        out += body
    deflated = zlib.compress(bytes(out[1:]), 9, -9)  # a 512-byte window: a snapshot is a few hundred bytes
    if len(deflated) + 1 < len(out):
        return bytes([out[0] | DEFLATED]) + deflated
    return bytes(out)


def plain(data: Packed) -> bytes:
    """A packed snapshot's bytes without its own deflate (a history chunk deflates many together)."""
    data = bytes(data)
    if data[0] & DEFLATED:
        data = bytes([data[0] & ~DEFLATED]) + zlib.decompress(data[1:], -15)
    return data


def _decode(data: Packed) -> tuple[bool, list[tuple[int, str, list[Figure]]]]:
    """(rollup?, [(server id, status, [values])]): a raw poll's values are FIELDS in order, a rollup's are
    (average, minimum, maximum) of each."""
    data = plain(data)
    rollup = data[0] == ROLLUP_V1
    n_values = len(FIELDS) * (3 if rollup else 1)
    n_tag_bytes = (n_values + 3) // 4
    count, i = _read_varint(data, 1)
    entries: list[tuple[int, str, list[Figure]]] = []
    for _ in range(count):
        server_id, i = _read_varint(data, i)
        status = STATUSES[min(data[i], len(STATUSES) - 1)]
        i += 1
        tags = [t >> shift & 3 for t in data[i : i + n_tag_bytes] for shift in (0, 2, 4, 6)]
        i += n_tag_bytes
        values: list[Figure] = []
        avg: Figure = None
        for k in range(n_values):
            tag = tags[k]
            v: Figure
            if tag == 0:
                v = None
            elif tag == 1:
                v = data[i]
                i += 1
                if v >= 0x80:
                    v, i = _read_varint(data, i - 1)
            elif tag == 2:
                v = _F32.unpack_from(data, i)[0]
                i += 4
            else:
                v = avg
            if not rollup or k % 3 == 0:
                avg = v
            values.append(v)
        entries.append((server_id, status, values))
    return rollup, entries


def _position(field: str, rollup: bool) -> int:
    """Where a figure (FIELDS, EXTREMES) is in a decoded entry's values."""
    base, end = (field[:-4], field[-3:]) if field[-4:] in ("_min", "_max") else (field, None)
    i = FIELDS.index(base)
    return i * 3 + {None: 0, "min": 1, "max": 2}[end] if rollup else i


def _positions(fields: Iterable[str], rollup: bool) -> list[int | None]:
    """Where each of `fields` is in a decoded entry's values ("status": None)."""
    return [None if f == "status" else _position(f, rollup) for f in fields]


def unpack(data: Packed) -> list[tuple[int, str, dict[str, Figure]]]:
    """[(server id, status, {field: value})] with every field and its _min / _max (a raw poll's extremes
    are its values)."""
    rollup, entries = _decode(data)
    names = [*FIELDS, *EXTREMES]
    positions = [_position(f, rollup) for f in names]
    return [(sid, status, dict(zip(names, (values[p] for p in positions)))) for sid, status, values in entries]


def rollup(snapshots: Iterable[tuple[int, Packed]], ts: datetime, resolution: int) -> list[PoolSnapshot]:
    """Unsaved PoolSnapshot rows of one bucket from its finer snapshots [(node id, servers)]: per server the
    average of each figure (of the finer averages, as the SQL rollups do), the minimum of the minimums, the
    maximum of the maximums and the worst status."""
    seen: defaultdict[int, defaultdict[int, list[tuple[str, dict[str, Figure]]]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for node_id, data in snapshots:
        for server_id, status, values in unpack(data):
            seen[node_id][server_id].append((status, values))
    out = []
    for node_id, servers in seen.items():
        entries: list[Entry] = []
        for server_id, polls in servers.items():

            def known(name: str) -> list[int | float]:  # the polls' values of a figure, None left out
                return [x for _, v in polls if (x := v[name]) is not None]

            agg: dict[str, Figure] = {}
            for f in FIELDS:
                avgs = known(f)
                agg[f] = sum(avgs) / len(avgs) if avgs else None
                agg[f"{f}_min"] = min(known(f"{f}_min"), default=None)
                agg[f"{f}_max"] = max(known(f"{f}_max"), default=None)
            entries.append((server_id, worst_status(s for s, _ in polls), agg))
        out.append(PoolSnapshot(node_id=node_id, ts=ts, resolution=resolution, servers=pack(entries, rollup=True)))
    return out


# -- servers ---------------------------------------------------------------------------------------
_server_ids: dict[tuple[int, int, str, int], int] = {}  # (node id, hostgroup, host, port) -> PoolServer id, per process


def server_ids(node_id: int, keys: Iterable[ServerKey]) -> dict[ServerKey, int]:
    """{(hostgroup, host, port): PoolServer id} for one node, made on first sight (another worker may make
    the same one at the same moment: the unique key keeps one)."""
    want = {(node_id, *k) for k in keys}
    missing = [k for k in want if k not in _server_ids]
    if missing:
        PoolServer.objects.bulk_create(
            [PoolServer(node_id=n, hostgroup=hg, srv_host=h, srv_port=p) for n, hg, h, p in missing],
            ignore_conflicts=True,
        )
        for s in PoolServer.objects.filter(node_id=node_id).values_list("pk", "hostgroup", "srv_host", "srv_port"):
            _server_ids[(node_id, *s[1:])] = s[0]
    return {k[1:]: _server_ids[k] for k in want}


def forget_servers() -> None:
    """Drop the per-process cache (tests that recreate the database)."""
    _server_ids.clear()


def snapshot(node_id: int, ts: datetime, rows: Sequence[Mapping[str, Any]], resolution: int = RAW) -> PoolSnapshot:
    """An unsaved PoolSnapshot from rows {"hostgroup", "srv_host", "srv_port", "status", <field>...} (a row's
    values by name: its key's columns, its status and its figures)."""
    ids = server_ids(node_id, [(r["hostgroup"], r["srv_host"], r["srv_port"]) for r in rows])
    entries = [(ids[(r["hostgroup"], r["srv_host"], r["srv_port"])], r.get("status", "ONLINE"), r) for r in rows]
    return PoolSnapshot(node_id=node_id, ts=ts, resolution=resolution, servers=pack(entries, resolution != RAW))
