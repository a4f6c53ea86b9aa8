"""The service's log: one JSON object per line on stderr, each line bounded whatever a
request holds.

Many fields come from callers (a project, a job id, a JSON Pointer, a rule list); a
line keeps the first characters of each string, the first items of each list or
object (saying how much it left out), and is at most MAX_LINE characters: a value
that would pass that is clipped harder, and at worst the line keeps its timestamp,
level, logger and the start of its message. The log stays one bounded line per event
however large the request was.

Must not decide what is logged: the modules that log do; this only writes it.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import islice
from typing import Any

# Characters in one log line, at most (JSON escapes included).
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


def render(entry: dict[str, Any]) -> str:
    """One JSON line of at most MAX_LINE characters for `entry`."""
    for bounds in (ROOMY, TIGHT):
        kept = {key: clip_middle(value, bounds.traceback) if key == "traceback" and isinstance(value, str) else bounded(value, bounds) for key, value in entry.items()}
        line = json.dumps(kept)
        if len(line) <= MAX_LINE:
            return line
    # Its fields left out whole: what happened and when still reach the log.
    head = {key: entry[key] for key in ("ts", "level", "logger") if key in entry}
    return json.dumps({**head, "message": clip(str(entry.get("message", "")), 256), "clipped": f"the line's {len(entry) - len(head) - 1} fields passed {MAX_LINE} characters"})


class JsonLogFormatter(logging.Formatter):
    """One JSON object per line: an RFC 3339 UTC timestamp, level, logger, message, the
    record's fields, and the traceback of an error logged with one; bounded (`render`)."""

    def format(self, record: logging.LogRecord) -> str:
        ts = datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        entry = {"ts": ts, "level": record.levelname.lower(), "logger": record.name, "message": record.getMessage()}
        entry.update(getattr(record, "fields", {}))
        if record.exc_info:
            entry["traceback"] = self.formatException(record.exc_info)
        return render(entry)
