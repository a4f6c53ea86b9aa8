"""The service's log: one JSON object per line on stderr, each line bounded whatever a
request holds.

Many fields come from callers (a project, a job id, a JSON Pointer, a rule list); a
line keeps the first characters of each string, the first items of each list or
object (saying how much it left out), and is at most MAX_LINE characters: a value
that would pass that is clipped harder, and at worst the line keeps its timestamp,
level, logger and the start of its message. The log stays one bounded line per event
however large the request was.

A log with a line per call (the request log) is written by a thread of its own
(`LineWriter`, over the core's `LineSink`): the call encodes its fields and goes on,
and the thread stamps and writes them, many lines to a write, without taking the GIL.
A call never waits for the log: when the writer falls behind and its queue is full,
the line is dropped and counted.

Must not decide what is logged: the modules that log do; this only writes it.
"""

from __future__ import annotations

import json
import logging
import os
import select
import time
from dataclasses import dataclass
from itertools import islice
from typing import Any, BinaryIO, Protocol

import orjson

from jobgate._core import LineSink

# Bytes in one log line, at most (its newline aside).
MAX_LINE = 16 * 1024


@dataclass(frozen=True)
class Bounds:
    """How much of a value a line keeps: a string's first `chars` characters (a
    traceback's `traceback`), a list's or object's first `items` items, `depth` levels."""

    chars: int
    items: int
    traceback: int
    depth: int = 3


# Tried in order until the line fits MAX_LINE.
ROOMY = Bounds(chars=1024, items=10, traceback=8192)
TIGHT = Bounds(chars=96, items=3, traceback=2048)
# Integers within this range are written as numbers; larger ones come from no counter.
_INT_RANGE = range(-(2**63), 2**64)


def clip(text: str, chars: int) -> str:
    """`text` cut to its first `chars` characters, saying how many were left out."""
    if len(text) <= chars:
        return text
    return f"{text[:chars]}…(+{len(text) - chars} chars)"


def clip_middle(text: str, chars: int) -> str:
    """`text` cut to its first and last `chars`/2 characters: a traceback keeps its
    first frames and the exception that ended it."""
    if len(text) <= chars:
        return text
    half = chars // 2
    return f"{text[:half]}\n…(+{len(text) - 2 * half} chars)…\n{text[-half:]}"


def bounded(value: Any, bounds: Bounds, depth: int = 0) -> Any:
    """`value` as JSON-ready data within `bounds`."""
    if value is None or isinstance(value, (bool, float)):
        return value
    if isinstance(value, int):
        return value if value in _INT_RANGE else "(an integer too large to log)"
    if isinstance(value, str):
        return clip(value, bounds.chars)
    if depth < bounds.depth and isinstance(value, dict):
        out = {clip(str(k), bounds.chars): bounded(v, bounds, depth + 1) for k, v in islice(value.items(), bounds.items)}
        if len(value) > bounds.items:
            out["…"] = f"{len(value) - bounds.items} more"
        return out
    if depth < bounds.depth and isinstance(value, (list, tuple, set, frozenset)):
        out = [bounded(v, bounds, depth + 1) for v in islice(value, bounds.items)]
        if len(value) > bounds.items:
            out.append(f"… {len(value) - bounds.items} more")
        return out
    return clip(str(value), bounds.chars)


def encode(entry: dict[str, Any]) -> bytes:
    """One JSON line of at most MAX_LINE bytes for `entry`, without its newline."""
    if _plain(entry):
        try:
            line = orjson.dumps(entry)
        except orjson.JSONEncodeError:  # a lone surrogate, an integer past 64 bits: bounded below
            line = b""
        # No string in a line this short can be longer than ROOMY keeps: bounding would
        # change nothing.
        if 0 < len(line) <= ROOMY.chars:
            return line
    for bounds in (ROOMY, TIGHT):
        kept = {key: clip_middle(value, bounds.traceback) if key == "traceback" and isinstance(value, str) else bounded(value, bounds) for key, value in entry.items()}
        line = _dumps(kept)
        if len(line) <= MAX_LINE:
            return line
    # Its fields left out whole: what happened and when still reach the log.
    head = {key: entry[key] for key in ("ts", "level", "logger") if key in entry}
    return _dumps({**head, "message": clip(str(entry.get("message", "")), 256), "clipped": f"the line's {len(entry) - len(head) - 1} fields passed {MAX_LINE} bytes"})


_SCALARS = frozenset({str, int, float, bool, type(None)})


def _plain(entry: dict[str, Any]) -> bool:
    """Whether `entry` holds only scalars and lists of at most ROOMY.items scalars: what
    bounding keeps as it is, but for long strings (most lines, the request log's all)."""
    values = entry.values()
    if _SCALARS.issuperset(map(type, values)):
        return True
    for value in values:
        kind = type(value)
        if kind not in _SCALARS and not (kind is list and len(value) <= ROOMY.items and all(type(v) in _SCALARS for v in value)):
            return False
    return True


def render(entry: dict[str, Any]) -> str:
    """`encode`, as text."""
    return encode(entry).decode()


def _dumps(kept: dict[str, Any]) -> bytes:
    try:
        return orjson.dumps(kept)
    except orjson.JSONEncodeError:  # a string that is not UTF-8 (a lone surrogate): escaped instead
        return json.dumps(kept).encode()


_stamped: tuple[int, str] = (-1, "")  # the last millisecond stamped, written out
_second: tuple[int, str] = (-1, "")  # the last second stamped, written out to the seconds


def timestamp(created: float) -> str:
    """RFC 3339 UTC, to the millisecond (`created` from time.time())."""
    global _stamped, _second
    milli = round(created * 1_000_000) // 1000
    stamped = _stamped
    if stamped[0] != milli:  # lines come several to a millisecond: each is written once
        whole, rest = divmod(milli, 1000)
        second = _second
        if second[0] != whole:  # and a second's lines share its date and time: formatted once
            second = _second = (whole, time.strftime("%Y-%m-%dT%H:%M:%S.", time.gmtime(whole)))
        stamped = _stamped = (milli, f"{second[1]}{rest:03d}Z")
    return stamped[1]


class JsonLogFormatter(logging.Formatter):
    """One JSON object per line: an RFC 3339 UTC timestamp, level, logger, message, the
    record's fields, and the traceback of an error logged with one; bounded (`render`)."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {"ts": timestamp(record.created), "level": record.levelname.lower(), "logger": record.name, "message": record.getMessage()}
        entry.update(getattr(record, "fields", {}))
        if record.exc_info:
            entry["traceback"] = self.formatException(record.exc_info)
        return render(entry)


class Counts(Protocol):
    def inc(self, amount: float = 1) -> None: ...


# Lines waiting for the writer, at most: past that, a line is dropped and counted.
QUEUED_LINES = 8192
# Lines are written together, whole, up to this many bytes a write: a write of at most
# PIPE_BUF bytes to a pipe is never interleaved with another process's (the workers of
# `serve --workers N` share their supervisor's stderr).
WRITE_BYTES = select.PIPE_BUF
# How long the writer lets lines gather after the first one arrives: one wake-up and a
# few writes for a busy server's many lines.
GATHER_SECONDS = 0.005
# The fields every line begins with, in this order.
_HEAD = frozenset({"ts", "level", "logger", "message"})


class LineWriter:
    """The lines of one logger (`logger`, at info), written to `stream` by a thread of
    the core (`_core.LineSink`) that never takes the GIL to write a file. `write`
    encodes a line's fields (orjson) and hands them over; the thread stamps and joins
    them and writes many lines to a write. When `capacity` lines are already waiting
    the line is dropped and counted in `dropped`, as is a line the stream refuses;
    `close` writes every line handed over before it."""

    def __init__(self, stream: BinaryIO, logger: str, dropped: Counts, capacity: int | None = None) -> None:
        self._logger, self._dropped = logger, dropped
        target: dict[str, Any]
        try:
            target = {"fd": os.dup(stream.fileno())}  # a file: written by the core, its own descriptor
        except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is both
            target = {"stream": stream}  # a stream with no file (a buffer): through its write()
        self._sink = LineSink(**target, capacity=QUEUED_LINES if capacity is None else capacity, write_bytes=WRITE_BYTES, gather_seconds=GATHER_SECONDS)
        self._heads: dict[str, bytes] = {}  # by message: its line's fields after the timestamp
        self._closed = False

    def write(self, created: float, message: str, fields: dict[str, Any]) -> None:
        """Hands a line over (`created` is its time.time()); never waits. A line of
        scalars (and short lists of them), as the request log's are, is spliced by the
        core from its fields; any other is bounded (`encode`) here, whole."""
        try:
            dropped = self._spliced(created, message, fields)
            if dropped is None:
                dropped = self._sink.whole(encode({"ts": timestamp(created), "level": "info", "logger": self._logger, "message": message, **fields}))
        except Exception:  # noqa: BLE001 - a line that cannot be encoded is lost alone, counted
            dropped = 1
        if dropped:
            self._dropped.inc(dropped)

    def pending(self) -> int:
        """Lines handed over that the writer has not taken yet."""
        return self._sink.pending()

    def close(self, timeout: float = 30) -> None:
        """Writes the lines handed over so far and ends the thread (within `timeout`
        seconds: a stream that takes nothing cannot hold a stopping server)."""
        if not self._closed:
            self._closed = True
            lost = self._sink.close(timeout)
            if lost:
                self._dropped.inc(lost)

    def _spliced(self, created: float, message: str, fields: dict[str, Any]) -> int | None:
        """What `LineSink.line` answers for a line the core can splice, byte for byte
        the line `encode` makes of it; None for one that needs bounding."""
        if not (fields and _plain(fields) and _HEAD.isdisjoint(fields)):
            return None
        head = self._heads.get(message)
        if head is None:
            head = self._heads[message] = orjson.dumps({"level": "info", "logger": self._logger, "message": message})[1:-1]
        try:
            body = orjson.dumps(fields)
        except orjson.JSONEncodeError:  # a string that is not UTF-8: escaped by encode
            return None
        if _SPLICED + len(head) + len(body) > ROOMY.chars:
            return None
        return self._sink.line(created, head, body)


# A spliced line's characters beside its head and its fields: `{"ts":"`, the
# 24-character timestamp and `",` (the comma after the head takes the place of the
# fields' opening brace).
_SPLICED = len('{"ts":"') + len("2026-12-02T22:31:00.123Z") + len('",')
