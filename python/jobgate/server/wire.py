"""The wire: protobuf messages to the values the gate takes, and reports and records
back to messages.

Owns decoding a request from its bytes (a request that is not one is
INVALID_ARGUMENT with a google.rpc.BadRequest naming it, never grpc's own INTERNAL),
a document's bytes and kind (raw bytes as sent, a typed message as its JSON form),
its idempotency key and the request's fingerprint, a value given as a string or as
its enum twin (`either`), and encoding reports and job records (every string of a
closed set with its enum twin), AdmitBatch's response without a message object per
document.

Must not judge a document (the core does), decide who may call (`grants`) or touch
the store: it only turns one form into another.
"""

from __future__ import annotations

import math

import blake3
import grpc
import orjson
from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message

import jobgate._core
from jobgate.server.errors import bad_request
from jobgate.store.base import MAX_IDEMPOTENCY_KEY_BYTES, SOURCES, STATES
from jobgate.v1 import admission_pb2, job_pb2, report_pb2

# jobgate.v1.Kind by number, as the core's kind table names it; None (KIND_UNSPECIFIED) detects the kind.
KIND_NAMES = {0: None} | {k["proto"]: k["name"] for k in jobgate._core.kind_table()}
# A report's kind as jobgate.v1.Kind: "unknown", a document of no kind, is KIND_UNSPECIFIED.
KIND_CODES = {name: number for number, name in KIND_NAMES.items() if name}


def twins(enum, prefix: str, words) -> dict[str, int]:
    """Each string of a closed set and its enum twin: the prefix and the string in
    capitals, "-" as "_" ("backend-hook" is TRANSITION_SOURCE_BACKEND_HOOK). A string
    without a twin fails here, at import, not in a call."""
    return {w: enum.Value(prefix + w.upper().replace("-", "_")) for w in words}


VERDICTS = twins(report_pb2.Verdict, "VERDICT_", ("pass", "fail"))
SEVERITIES = twins(report_pb2.Severity, "SEVERITY_", ("error", "warning", "off"))
JOB_STATES = twins(job_pb2.JobState, "JOB_STATE_", STATES)
TRANSITION_SOURCES = twins(job_pb2.TransitionSource, "TRANSITION_SOURCE_", SOURCES)
# The core names its recipe statuses; the enum lists them ("upgrade_advised").
RECIPE_STATUSES = {name.removeprefix("RECIPE_STATUS_").lower(): number for name, number in admission_pb2.RecipeStatus.items() if number}


def either(context: grpc.ServicerContext, request: Message, field: str, twin: str, codes: dict[str, int], default: str = "") -> str:
    """A request's value given as the string `field` or its enum twin `twin` (the enum
    when it is set, else the string, else `default`); INVALID_ARGUMENT naming both when
    both are given and disagree, naming `twin` for a number the enum does not have."""
    text, code = getattr(request, field), getattr(request, twin)
    if not code:
        return text or default
    word = next((w for w, c in codes.items() if c == code), None)
    if word is None:
        bad_request(context, twin, f"{code} is not a value of {request.DESCRIPTOR.fields_by_name[twin].enum_type.full_name}")
    if text and text != word:
        bad_request(context, field, f"{field} is {text!r} and {twin} is {word!r}: they disagree; give one, or both alike", twin)
    return word


def decode(message_type: type[Message], data: bytes, context: grpc.ServicerContext, field: str = "request", what: str = "") -> Message:
    """`data` as a `message_type`, or INVALID_ARGUMENT naming `field` when it is not one."""
    try:
        return message_type.FromString(data)
    except DecodeError:
        bad_request(context, field, f"{what}is not an encoded {message_type.DESCRIPTOR.full_name}")


# ---- reports and records out


class Encoded:
    """An encoded Admit response (the core's on the dry-run path, `ResponseEncoder`'s
    for a clean report), with what the request log says of it: its verdict, rule ids
    and job id."""

    __slots__ = ("data", "verdict", "rules", "job_id")

    def __init__(self, data: bytes, verdict: str, rules: list[str], job_id: str = "") -> None:
        self.data, self.verdict, self.rules, self.job_id = data, verdict, rules, job_id


def sent(response) -> bytes:
    """What a method handed its request's bytes answers, as sent: bytes it encoded
    itself, a response the core encoded (`Encoded`), or a message."""
    kind = type(response)
    if kind is bytes:
        return response
    if kind is Encoded:
        return response.data
    return response.SerializeToString()


def report_message(report) -> report_pb2.Report:
    """The report with every string's enum twin; the core encodes AdmitBatch's dry runs
    alike (rust/src/batch_wire.rs), a test holds the two to the same bytes."""
    return report_pb2.Report(
        kind=report.kind,
        verdict=report.verdict,
        violations=[
            report_pb2.Violation(
                rule=v.rule,
                field=v.field,
                message=v.message,
                severity=v.severity,
                line=v.line or 0,
                column=v.column or 0,
                default_severity=v.default_severity or "",
                severity_code=SEVERITIES[v.severity],
                default_severity_code=SEVERITIES.get(v.default_severity or "", 0),
            )
            for v in report.violations
        ],
        verdict_code=VERDICTS[report.verdict],
        kind_code=KIND_CODES.get(report.kind, 0),
    )


def record_message(record: dict) -> job_pb2.JobRecord:
    """A job record as the store exports it; keys of the store's own (`_seq`) are left out."""
    clean = {k: v for k, v in record.items() if not k.startswith("_")}
    return json_format.ParseDict(clean, job_pb2.JobRecord())


def state_code(record: dict) -> int:
    """The record's current state (its last transition's) as a JobState."""
    transitions = record.get("transitions") or [{}]
    return JOB_STATES.get(transitions[-1].get("state", ""), 0)


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def size_as_field(payload: int) -> int:
    """Bytes a length-delimited field of `payload` bytes takes (tag, length, payload)."""
    return 1 + len(_varint(payload)) + payload


class ResponseEncoder:
    """Admit and AdmitBatch responses as bytes, without a message object per answer:
    a clean report is the same for every document of its kind, so it is encoded once,
    and a job id is the field after it."""

    def __init__(self) -> None:
        self._clean: dict[tuple[str, str], bytes] = {}

    def admit(self, report, job_id: str = "") -> Encoded | None:
        """The AdmitResponse of a clean report and `job_id`; None for a report with
        violations (encoded as a message)."""
        if report.violations:
            return None
        key = (report.kind, report.verdict)
        clean = self._clean.get(key)
        if clean is None:
            clean = self._clean[key] = _field(1, report_message(report).SerializeToString())
        return Encoded(clean + _field(2, job_id.encode()) if job_id else clean, report.verdict, [], job_id)

    def item(self, report, job_id: str = "") -> bytes:
        """One AdmitBatchResponse item."""
        clean = self.admit(report, job_id)
        if clean is not None:
            return _field(1, clean.data)
        return _field(1, admission_pb2.AdmitResponse(report=report_message(report), job_id=job_id).SerializeToString())

    def response(self, reports) -> bytes:
        return b"".join(self.item(r) for r in reports)


# ---- documents in


def _non_finite(message: Message, path: str) -> str | None:
    """The path of a number with no JSON form (NaN, infinity) in a google.protobuf
    Value of `message`, the one thing a typed message can hold that JSON cannot."""
    name = message.DESCRIPTOR.full_name
    if name == "google.protobuf.Value":
        kind = message.WhichOneof("kind")
        if kind == "number_value":
            return None if math.isfinite(message.number_value) else path
        if kind in ("struct_value", "list_value"):
            return _non_finite(getattr(message, kind), path)
        return None
    if name == "google.protobuf.Struct":
        return next((p for key, value in message.fields.items() if (p := _non_finite(value, f"{path}.{key}"))), None)
    if name == "google.protobuf.ListValue":
        return next((p for i, value in enumerate(message.values) if (p := _non_finite(value, f"{path}[{i}]"))), None)
    for fd, value in message.ListFields():
        if fd.type != fd.TYPE_MESSAGE:
            continue
        if fd.message_type.GetOptions().map_entry:
            items = [(f"{path}.{fd.name}[{key!r}]", v) for key, v in value.items() if isinstance(v, Message)]
        elif fd.is_repeated:
            items = [(f"{path}.{fd.name}[{i}]", v) for i, v in enumerate(value)]
        else:
            items = [(f"{path}.{fd.name}", value)]
        found = next((p for where, v in items if (p := _non_finite(v, where))), None)
        if found:
            return found
    return None


def _typed_json(typed: Message, context: grpc.ServicerContext, field: str, lists: tuple[str, ...] = ()) -> bytes:
    """The typed message's JSON form, with the top-level arrays `lists` even when empty."""
    try:
        form = json_format.MessageToDict(typed)
        for name in lists:
            form.setdefault(name, [])
        return orjson.dumps(form)
    except json_format.Error:
        where = _non_finite(typed, field) or field
        bad_request(context, where, "is NaN or infinite, which JSON cannot hold; send a finite number or raw document bytes")


# The typed members of Document's body, each named as the kind it is (a typed message
# given no kind is checked as its own).
TYPED = frozenset(KIND_CODES)
# The top-level arrays each kind's schema requires. proto3 has no absent list: a typed
# message always holds them, so its JSON form does too, empty ones included (an empty
# all_recs or declared_inputs is valid; left out, it would be schema.required).
REQUIRED_LISTS = {k["name"]: k["typed_lists"] for k in jobgate._core.kind_table()}


def document_bytes(document: admission_pb2.Document, context: grpc.ServicerContext, field: str) -> tuple[bytes, str | None]:
    """The bytes the core checks: raw bytes as sent, or the typed message's JSON form."""
    kind = KIND_NAMES.get(document.kind)
    which = document.WhichOneof("body")
    if which == "raw":
        return document.raw, kind
    if which in TYPED:
        return _typed_json(getattr(document, which), context, f"{field}.{which}", REQUIRED_LISTS[which]), kind or which
    bad_request(context, f"{field}.body", "a document needs raw bytes or a typed jobspec, spec_bundle, job_record or best_rec")


def raw_dry_run(data: bytes, kind: str | None) -> bytes:
    """The encoded dry-run AdmitRequest of `data` as raw bytes, of `kind`: a typed
    message's JSON form, handed to the core as the raw document it stands for."""
    document = admission_pb2.Document(raw=data, kind=KIND_CODES.get(kind or "", 0))
    return admission_pb2.AdmitRequest(document=document, dry_run=True).SerializeToString()


def idempotency_key(document: admission_pb2.Document, context: grpc.ServicerContext, field: str) -> str:
    """The document's idempotency key ("" for none), or INVALID_ARGUMENT naming it when
    it is longer than a key may be."""
    key = document.idempotency_key
    size = len(key.encode())
    if size > MAX_IDEMPOTENCY_KEY_BYTES:
        bad_request(context, f"{field}.idempotency_key", f"is {size} bytes; an idempotency key is at most {MAX_IDEMPOTENCY_KEY_BYTES} bytes")
    return key


def fingerprint(document: admission_pb2.Document) -> bytes:
    """BLAKE3 of what makes a retry the same request: the kind it names, the document
    (raw bytes as sent; a typed message in its deterministic encoding, whose map order
    is fixed) and the package. Each part is framed by its length, so no two requests
    share a fingerprint by shifting bytes from one part to the next."""
    form = document.WhichOneof("body") or ""
    if form == "raw":
        body = document.raw
    elif form:
        body = getattr(document, form).SerializeToString(deterministic=True)
    else:
        body = b""
    hasher = blake3.blake3()
    for part in (b"jobgate.v1.Document", form.encode(), str(document.kind).encode(), body, document.package):
        hasher.update(len(part).to_bytes(8, "little"))
        hasher.update(part)
    return hasher.digest()
