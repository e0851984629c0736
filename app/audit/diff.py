"""Compare recomputed directives (expected) with the control topic (actual).

Directives are grouped by who they throttle: `(scope, broker, entity, quota)`, the entity as
its canonical string (`app.contract.entities.entity_string`). Inside a group they are paired by
`ts` (the decision time the directive carries); directives with the same `ts` pair in order
(expected: input order; actual: control-topic order). Each pair or leftover gets a status:

- `matched`: every other field is equal (`v`, `action`, `throttle_time_ms`, `until`,
  `observed`, `limit`, `window_ms`, `config_level`, and any extra field either side carries);
- `different`: paired, but some fields differ; `fields` lists them;
- `missing`: recomputed, not on the control topic (the pipeline did not publish it);
- `unexpected`: on the control topic, not recomputed;
- `duplicate`: an identical copy of a control-topic directive already paired (the pipeline
  is at-least-once: a failover re-publishes some directives); not a mismatch;
- `invalid`: a control-topic record that is not a directive (not JSON, no ts/quota/entity).

Values compare with Python `==` on the decoded JSON, so 500 and 500.0 are equal and a float
must be identical to the last bit to match (the engine is deterministic, so it is).

The comparator is pure Python over dicts (`compare`, `pair_group`), unit-tested without a JVM;
`diff_function` runs the same code over Spark's sorted Arrow batches.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from app.contract.entities import entity_string
from app.contract.directives import grouping_problem
from app.contract.keys import directive_key
from app.signing import Signing

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa

STATUSES = ("matched", "different", "missing", "unexpected", "duplicate", "invalid")
MISMATCH = ("different", "missing", "unexpected", "invalid")
KEY_FIELDS = ("scope", "broker", "entity", "quota", "ts")

#: Rows fed to the comparator (both sides), after parsing.
SIDE_DDL = (
    "side string, scope string, broker int, entity string, quota string, ts long, "
    "k1 long, k2 long, k3 long, json string, error string"
)
DIFF_DDL = (
    "status string, scope string, broker int, entity string, quota string, ts long, "
    "fields array<string>, expected string, actual string"
)

Group = tuple[str, int | None, str, str]


@dataclass
class DiffRow:
    status: str
    scope: str | None
    broker: int | None
    entity: str | None
    quota: str | None
    ts: int | None
    fields: list[str] = field(default_factory=list)
    expected: str | None = None
    actual: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"status": self.status, "scope": self.scope, "broker": self.broker,
                "entity": self.entity, "quota": self.quota, "ts": self.ts,
                "fields": self.fields, "expected": self.expected, "actual": self.actual}


def parse_directive(value: bytes | str | None, topic: str | None = None,
                    signing: Signing = Signing(), key: bytes | None = None, *,
                    keyless: bool = False) -> tuple[dict[str, Any] | None, str | None]:
    """A directive's JSON -> (directive dict, None) or (None, why it is not a directive).
    `topic`: read from that control topic, so sealed (`app.signing`): with `signing`'s keys
    (QS_SIGNING_KEYS) one no listed key sealed is refused, as the brokers refuse it. `key`: the record's Kafka key,
    which the seal covers; `keyless`: read from an archive that kept no keys (JSON lines), so
    the seal is checked under the key the workers write that directive with."""
    raw = value.encode() if isinstance(value, str) else (value or b"")
    if topic is not None:
        if keyless:
            key = written_key(raw)
        payload, refused = signing.open(topic, key, raw)
        if payload is None:
            return None, f"refused: {refused}"
        raw = payload
    try:
        d = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        return None, f"not JSON: {exc}"
    problem = grouping_problem(d)
    return (None, problem) if problem is not None else (d, None)


def written_key(raw: bytes) -> bytes | None:
    """The key a worker writes this control record with (`directive_key`), or None when it is
    not shaped like a directive (its seal then cannot verify)."""
    try:
        d = orjson.loads(Signing().open("", None, raw)[0] or b"")
        return directive_key(d)
    except (orjson.JSONDecodeError, TypeError, KeyError):
        return None


def group_of(d: dict[str, Any]) -> Group:
    """(scope, broker, entity, quota); allocations (cluster scope) pair among themselves."""
    broker = d.get("broker")
    scope = d.get("scope") or ("cluster" if broker is None else "broker")
    if d.get("kind") == "allocation":
        scope = "allocation"
    return (str(scope), broker, entity_string(d["entity"]), d["quota"])


def differing_fields(expected: dict[str, Any], actual: dict[str, Any]) -> list[str]:
    """Fields (other than the pairing key) whose values differ, in a stable order."""
    names = [k for k in expected if k not in KEY_FIELDS]
    names += [k for k in actual if k not in KEY_FIELDS and k not in expected]
    return [k for k in names if expected.get(k, _MISSING) != actual.get(k, _MISSING)]


_MISSING = object()


def pair_group(group: Group, expected: list[tuple[int, str, dict[str, Any]]],
               actual: list[tuple[int, str, dict[str, Any]]]) -> Iterator[DiffRow]:
    """Pair one group's directives. Each side: `(ts, json text, dict)` in its own order.

    Both lists must be sorted by ts (stable within a ts); output is in ts order.
    """
    scope, broker, entity, quota = group
    i = j = 0
    paired: list[dict[str, Any]] = []  # actual directives paired at the current ts
    paired_ts = None
    while i < len(expected) or j < len(actual):
        if j >= len(actual) or (i < len(expected) and expected[i][0] < actual[j][0]):
            ts, text, _ = expected[i]
            yield DiffRow("missing", scope, broker, entity, quota, ts, [], text, None)
            i += 1
        elif i >= len(expected) or actual[j][0] < expected[i][0]:
            ts, text, adict = actual[j]
            status = "duplicate" if paired_ts == ts and adict in paired else "unexpected"
            yield DiffRow(status, scope, broker, entity, quota, ts, [], None, text)
            j += 1
        else:
            ts, etext, edict = expected[i]
            _, atext, adict = actual[j]
            fields = differing_fields(edict, adict)
            if paired_ts != ts:
                paired, paired_ts = [], ts
            if adict in paired:  # a re-published copy of one paired here: the expected waits
                yield DiffRow("duplicate", scope, broker, entity, quota, ts, [], None, atext)
                j += 1
                continue
            paired.append(adict)
            yield DiffRow("different" if fields else "matched", scope, broker, entity, quota,
                          ts, fields, etext, atext)
            i += 1
            j += 1


def compare(expected: Iterable[bytes | str | dict[str, Any]],
            actual: Iterable[bytes | str | dict[str, Any]], topic: str | None = None,
            signing: Signing = Signing()) -> list[DiffRow]:
    """Whole-list comparison (in-process): expected and actual directives in their orders;
    `topic`: the control topic the actual ones (values without their keys) were read from,
    verified with `signing` (`parse_directive`)."""

    def load(items: Iterable[bytes | str | dict[str, Any]], side: str
             ) -> tuple[dict[Group, list[tuple[int, str, dict[str, Any]]]], list[DiffRow]]:
        groups: dict[Group, list[tuple[int, str, dict[str, Any]]]] = {}
        bad: list[DiffRow] = []
        for item in items:
            if isinstance(item, dict):
                d, err, text = item, None, orjson.dumps(item).decode()
            else:
                d, err = parse_directive(item, topic if side == "actual" else None, signing,
                                         keyless=True)
                text = item.decode("utf-8", "replace") if isinstance(item, bytes) else item
            if d is None:
                if side == "expected":
                    raise ValueError(f"recomputed directive is invalid: {err}")
                bad.append(DiffRow("invalid", None, None, None, None, None, [err or ""], None,
                                   text))
                continue
            groups.setdefault(group_of(d), []).append((d["ts"], text, d))
        for rows in groups.values():
            rows.sort(key=lambda r: r[0])  # stable: same-ts keep their order
        return groups, bad

    exp, _ = load(expected, "expected")
    act, bad = load(actual, "actual")
    out: list[DiffRow] = []
    for group in sorted(set(exp) | set(act), key=lambda g: (g[0], -1 if g[1] is None else g[1], g[2], g[3])):
        out.extend(pair_group(group, exp.get(group, []), act.get(group, [])))
    return out + bad


def summarize(rows: Iterable[DiffRow]) -> dict[str, int]:
    counts = {status: 0 for status in STATUSES}
    for row in rows:
        counts[row.status] += 1
    return counts


def mismatches(counts: dict[str, int]) -> int:
    return sum(counts.get(s, 0) for s in MISMATCH)


def parse_tolerance(raw: str) -> tuple[float, bool]:
    """`--tolerance`: a count ("0", "25") or a percentage of compared directives ("0.5%")."""
    text = raw.strip()
    percent = text.endswith("%")
    try:
        value = float(text[:-1] if percent else text)
    except ValueError:
        raise ValueError(f"tolerance {raw!r}: use a count (e.g. 0, 25) or a percentage "
                         "(e.g. 0.5%)") from None
    if value < 0:
        raise ValueError(f"tolerance {raw!r} must be >= 0")
    return value, percent


def within_tolerance(counts: dict[str, int], tolerance: tuple[float, bool]) -> bool:
    """True when the mismatches are at most the tolerance (a count, or % of compared)."""
    value, percent = tolerance
    bad = mismatches(counts)
    if not percent:
        return bad <= value
    compared = sum(counts.values())
    return bad <= value / 100.0 * max(compared, 1)


# -- Spark adapters --------------------------------------------------------------------------


def side_rows_function(side: str, topic: str | None = None, signing: Signing = Signing()
                       ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """`mapInArrow` over control records (`value`, plus `partition`/`offset`/`key` when
    present; without `key`, an archive's: `parse_directive`): parse each into a comparator
    row (`SIDE_DDL`). `signing` goes to the executors with the function."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa

        for batch in batches:
            names = batch.schema.names
            values = batch.column(names.index("value")).to_pylist()
            n = len(values)
            k1 = batch.column(names.index("partition")).to_pylist() if "partition" in names else [0] * n
            k2 = batch.column(names.index("offset")).to_pylist() if "offset" in names else list(range(n))
            keys = batch.column(names.index("key")).to_pylist() if "key" in names else [None] * n
            cols: dict[str, list[Any]] = {c: [] for c in ("side", "scope", "broker", "entity",
                                                          "quota", "ts", "k1", "k2", "k3",
                                                          "json", "error")}
            for value, a, b, key in zip(values, k1, k2, keys):
                d, err = parse_directive(value, topic, signing, key, keyless="key" not in names)
                text = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
                if d is None:
                    row = (side, None, None, None, None, None, a or 0, b or 0, 0, text, err)
                else:
                    scope, broker, entity, quota = group_of(d)
                    text = orjson.dumps(d).decode()  # without its seal, if it had one
                    row = (side, scope, broker, entity, quota, d["ts"], a or 0, b or 0, 0, text,
                           None)
                for name, v in zip(cols, row):
                    cols[name].append(v)
            yield _side_batch(cols, pa)

    return run


def _side_batch(cols: dict[str, list[Any]], pa: Any) -> pa.RecordBatch:
    types = {"side": pa.string(), "scope": pa.string(), "broker": pa.int32(),
             "entity": pa.string(), "quota": pa.string(), "ts": pa.int64(), "k1": pa.int64(),
             "k2": pa.int64(), "k3": pa.int64(), "json": pa.string(), "error": pa.string()}
    return pa.RecordBatch.from_arrays([pa.array(cols[n], types[n]) for n in types],
                                      names=list(types))


def diff_function() -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """`mapInArrow` over `SIDE_DDL` rows sorted by (group, ts, side order) -> `DIFF_DDL` rows.

    A group may span batches; it is compared when the next group starts (or at the end).
    """

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa

        current: Group | None = None
        exp: list[tuple[int, str, dict[str, Any]]] = []
        act: list[tuple[int, str, dict[str, Any]]] = []
        out: list[DiffRow] = []

        def flush() -> None:
            if current is not None:
                exp.sort(key=lambda r: r[0])
                act.sort(key=lambda r: r[0])
                out.extend(pair_group(current, exp, act))
            exp.clear()
            act.clear()

        for batch in batches:
            rows = batch.to_pylist()
            for r in rows:
                if r["error"] is not None:
                    out.append(DiffRow("invalid", None, None, None, None, None, [r["error"]],
                                       None, r["json"]))
                    continue
                group = (r["scope"], r["broker"], r["entity"], r["quota"])
                if group != current:
                    flush()
                    current = group
                entry = (r["ts"], r["json"], orjson.loads(r["json"]))
                (exp if r["side"] == "e" else act).append(entry)
            if len(out) >= 10_000:
                yield _diff_batch(out, pa)
                out = []
        flush()
        if out:
            yield _diff_batch(out, pa)

    return run


def _diff_batch(rows: list[DiffRow], pa: Any) -> pa.RecordBatch:
    dicts = [r.as_dict() for r in rows]
    schema = pa.schema([("status", pa.string()), ("scope", pa.string()), ("broker", pa.int32()),
                        ("entity", pa.string()), ("quota", pa.string()), ("ts", pa.int64()),
                        ("fields", pa.list_(pa.string())), ("expected", pa.string()),
                        ("actual", pa.string())])
    return pa.RecordBatch.from_pylist(dicts, schema=schema)
