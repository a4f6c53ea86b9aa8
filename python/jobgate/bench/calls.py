"""What every call of a run sends: its method, its request messages (built from
documents, or given as proto JSON with `--data`), its metadata (`-H`, `--metadata`),
and the fingerprint of all three that `compare` checks two runs against.

Request messages are encoded once, before the run: the load only cycles bytes.
A request given as proto JSON is parsed with protobuf's `json_format` into the
method's request message, so a misspelt field is refused before any load is sent.

Must not send anything: the load does (`load`).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re

METHODS = {
    "admit": "/jobgate.v1.AdmissionService/Admit",
    "admit-batch": "/jobgate.v1.AdmissionService/AdmitBatch",
    "admit-stream": "/jobgate.v1.AdmissionService/AdmitStream",
    "empty": "/grpc.health.v1.Health/Check",
}
# Metadata keys as HTTP/2 carries them (gRPC's own rule): lowercase, no pseudo-headers.
_KEY = re.compile(r"[0-9a-z_.-]+")
# Keys whose values are kept in a saved run only as a digest: enough to tell two apart.
_SECRET_KEYS = ("authorization", "proxy-authorization", "cookie")
_SECRET_PARTS = ("token", "secret", "password", "api-key", "apikey")


class CallError(Exception):
    """A request or metadata that cannot be sent; the message says why (exit 2)."""


def request_class(call: str):
    """The request message of a call shape."""
    from grpc_health.v1 import health_pb2

    from jobgate.v1 import admission_pb2

    return {
        "admit": admission_pb2.AdmitRequest,
        "admit-batch": admission_pb2.AdmitBatchRequest,
        "admit-stream": admission_pb2.AdmitStreamRequest,
        "empty": health_pb2.HealthCheckRequest,
    }[call]


def documents_in(message) -> int:
    """How many documents a request message carries."""
    if hasattr(message, "documents"):
        return len(message.documents)
    if hasattr(message, "document"):
        return 1 if message.HasField("document") else 0
    return 0


def from_json(call: str, text: str, origin: str, open_records: bool) -> list:
    """Request messages from proto JSON: one object, or an array of them (cycled).
    `dry_run` follows `--dry-run`/`--open-records`: a request that says otherwise is
    refused, so that a JSON body never opens records behind the flag."""
    from google.protobuf import json_format

    try:
        body = json.loads(text)
    except ValueError as e:
        raise CallError(f"{origin}: not JSON: {e}") from None
    items = body if isinstance(body, list) else [body]
    if not items:
        raise CallError(f"{origin}: an empty array: give at least one request")
    cls = request_class(call)
    out = []
    for n, item in enumerate(items):
        where = f"{origin}[{n}]" if isinstance(body, list) else origin
        if not isinstance(item, dict):
            raise CallError(f"{where}: a request is a JSON object ({cls.DESCRIPTOR.full_name})")
        try:
            message = json_format.ParseDict(item, cls())
        except json_format.ParseError as e:
            raise CallError(f"{where}: not a {cls.DESCRIPTOR.full_name}: {e}") from None
        if "dry_run" in cls.DESCRIPTOR.fields_by_name:
            said = item.get("dry_run", item.get("dryRun"))
            if said is not None and bool(said) == open_records:
                wanted = "--dry-run (the default)" if said else "--open-records"
                raise CallError(f"{where}: sets dry_run to {str(said).lower()}, but the run was asked for {'--open-records' if open_records else 'dry runs'}: drop it from the JSON or give {wanted}")
            message.dry_run = not open_records
        out.append(message)
    return out


def from_documents(call: str, documents: list[bytes], batch: int, open_records: bool) -> list:
    """Request messages that carry `documents`, cycled: AdmitBatch requests cycle them
    as a stream of them would."""
    from jobgate.v1 import admission_pb2

    cls, dry = request_class(call), not open_records
    docs = [admission_pb2.Document(raw=d) for d in documents]
    if call == "empty":
        return [cls()]
    if call == "admit":
        return [cls(document=d, dry_run=dry) for d in docs]
    if call == "admit-stream":
        return [cls(request_id=str(i), document=d, dry_run=dry) for i, d in enumerate(docs)]
    count = len(docs) // _gcd(len(docs), batch) if len(docs) > 1 else 1
    ring = [docs[i % len(docs)] for i in range(count * batch)]
    return [cls(documents=ring[i * batch : (i + 1) * batch], dry_run=dry) for i in range(count)]


def _gcd(a: int, b: int) -> int:
    while b:
        a, b = b, a % b
    return a


def header(text: str) -> tuple[str, str]:
    """`-H 'key: value'` as a metadata pair."""
    key, colon, value = text.partition(":")
    if not colon:
        raise CallError(f"-H {text!r}: give KEY: VALUE")
    return key.strip(), value.strip()


def metadata_json(text: str, origin: str) -> list[tuple[str, str]]:
    """`--metadata '{"key": "value"}'` as ghz reads it: a value is a string, or an
    array of strings for a key sent more than once."""
    try:
        body = json.loads(text)
    except ValueError as e:
        raise CallError(f"{origin}: not JSON: {e}") from None
    if not isinstance(body, dict):
        raise CallError(f"{origin}: metadata is a JSON object of strings")
    out = []
    for key, value in body.items():
        values = value if isinstance(value, list) else [value]
        if not all(isinstance(v, str) for v in values):
            raise CallError(f"{origin}: {key}: a metadata value is a string, or an array of strings")
        out.extend((key, v) for v in values)
    return out


def checked(pairs: list[tuple[str, str]]) -> tuple[tuple[str, str | bytes], ...]:
    """Metadata as gRPC sends it. Keys are lowercased (HTTP/2 sends them so); a key
    ending in `-bin` is binary, its value given in base64."""
    out: list[tuple[str, str | bytes]] = []
    for raw_key, value in pairs:
        key = raw_key.lower()
        if not _KEY.fullmatch(key) or key.startswith("grpc-"):
            raise CallError(f"metadata key {raw_key!r}: a key is lowercase letters, digits, '-', '_' and '.', and grpc-* keys are gRPC's own")
        if key in ("te", "content-type", "user-agent", "host"):
            raise CallError(f"metadata key {raw_key!r}: set by gRPC itself")
        if key.endswith("-bin"):
            try:
                out.append((key, base64.b64decode(value, validate=True)))
            except ValueError:
                raise CallError(f"metadata {raw_key}: a -bin key takes a base64 value") from None
            continue
        if not value.isascii() or not value.isprintable():
            raise CallError(f"metadata {raw_key}: a value is printable ASCII (a -bin key carries bytes, in base64)")
        out.append((key, value))
    return tuple(out)


def merged(token_metadata: list[tuple[str, str]], given: tuple[tuple[str, str | bytes], ...]) -> tuple[tuple[str, str | bytes], ...]:
    """The token's `authorization` unless the given metadata sets its own."""
    if any(key == "authorization" for key, _ in given):
        token_metadata = [(k, v) for k, v in token_metadata if k != "authorization"]
    return (*token_metadata, *given)


def _secret(key: str) -> bool:
    return key in _SECRET_KEYS or any(part in key for part in _SECRET_PARTS)


def shown(metadata: tuple[tuple[str, str | bytes], ...]) -> list[list[str]]:
    """The metadata as a saved run keeps it: a secret's value only as a digest."""
    out = []
    for key, value in metadata:
        data = value if isinstance(value, bytes) else value.encode()
        if _secret(key):
            out.append([key, f"<redacted sha256:{hashlib.sha256(data).hexdigest()[:12]}>"])
        elif isinstance(value, bytes):
            out.append([key, base64.b64encode(value).decode()])
        else:
            out.append([key, value])
    return out


def fingerprint(encoded: tuple[bytes, ...]) -> str:
    """The request messages, in order, as one digest: two runs sent the same bodies
    exactly when their fingerprints are equal."""
    h = hashlib.sha256()
    for message in encoded:
        h.update(len(message).to_bytes(8, "big"))
        h.update(message)
    return f"sha256:{h.hexdigest()}"
