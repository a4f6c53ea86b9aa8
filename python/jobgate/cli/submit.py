"""`jobgate submit PATH... --server ADDR`: send documents to a running service and
print each verdict, its violations and the job id.

Safe to run and to retry. Each document is admitted under an idempotency key (a fresh
invocation id and the document's place in the run, or `--idempotency-key` for a
single document), and a call that fails for want of the server (UNAVAILABLE,
DEADLINE_EXCEEDED) is sent again with the same key after an exponential backoff: a
server that restarts mid-run admits every document exactly once. A document that
cannot be read, or whose call fails, is reported and the others go on; every job id
received is printed. Exit 2 names each document that got no verdict (not sent, or its
call failed); else 1 when some document failed, 0 when all passed.

Many documents go out on several connections at once (--connections), one call at a
time on each: `serve --workers N` shares connections among its workers, not calls, so
one connection would reach one worker. The output keeps the order of the arguments."""

from __future__ import annotations

import argparse
import os
import random
import secrets
import sys
import threading
import time
from dataclasses import dataclass

from jobgate import sources
from jobgate.cli import connect, formats
from jobgate.cli.usage import EXIT_ERROR, EXIT_FAIL, EXIT_PASS, UsageError
from jobgate.reports import ReportView
from jobgate.store.base import MAX_IDEMPOTENCY_KEY_BYTES

# Codes that say the call may not have reached a server able to answer: sent again,
# with the same key, so that a first attempt that was committed is answered, not repeated.
RETRIED = ("UNAVAILABLE", "DEADLINE_EXCEEDED")  # grpc.StatusCode names
# The first wait before a retry, doubled each time up to the cap (seconds), then
# jittered down to half so that many clients do not come back in step. Five retries
# wait about 8 to 15 seconds in all: long enough for a server to restart.
FIRST_BACKOFF, MAX_BACKOFF = 0.5, 8.0
# A channel that lost its server reconnects on its own schedule: kept shorter than the
# retries' waits, so that a restarted server is found by the next retry.
CHANNEL_OPTIONS = [("grpc.initial_reconnect_backoff_ms", 250), ("grpc.min_reconnect_backoff_ms", 250), ("grpc.max_reconnect_backoff_ms", int(MAX_BACKOFF * 1000 / 2))]
# Refusals of the caller, not of a document: every other document would get the same,
# so they are not sent.
REFUSED_CALLER = ("UNAUTHENTICATED", "PERMISSION_DENIED")
# A gRPC message cannot carry more: a larger file is not read, and not sent.
MAX_SEND_BYTES = 2**31 - 1
# Connections (and calls in flight) of a run of many documents. `serve --workers N`
# gives each connection, with every call on it, to one worker the kernel picks at
# random: 8 reach both of 2 workers 127 times in 128 (README, "Workers and connections").
DEFAULT_CONNECTIONS = 8


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("submit", help="send documents to a running service", description=__doc__)
    p.add_argument("paths", nargs="+", metavar="PATH")
    p.add_argument("--dry-run", action="store_true", help="check only: open no record (no idempotency key is sent)")
    p.add_argument("--package", metavar="FILE", help="a package (tar, tar.gz, tar.zst, zip) holding the bundle's supporting files, sent with each document")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.add_argument("--retries", type=int, default=5, metavar="N", help="times a call that got UNAVAILABLE or DEADLINE_EXCEEDED is sent again, with the same key (default: 5)")
    p.add_argument(
        "--idempotency-key",
        metavar="KEY",
        help=f"the key of the one document sent (at most {MAX_IDEMPOTENCY_KEY_BYTES} bytes): running the command again with it gets the first admission back; default: a fresh key per document; dry runs send none",
    )
    p.add_argument(
        "--connections",
        type=int,
        default=DEFAULT_CONNECTIONS,
        metavar="K",
        help=f"send up to K documents at once, one at a time on each of K TCP connections, so that every worker of `serve --workers N` gets some (default: {DEFAULT_CONNECTIONS}, which reach both of 2 workers 127 times in 128; one per document when fewer); with more than one, which documents a nearly spent quota admits is not fixed: 1 sends them one by one, in order",
    )
    connect.add_options(p)
    p.set_defaults(run=run)


@dataclass
class Submission:
    """One document of the run and what became of it: a report (and a job id when
    admitted), or the reason it got no verdict."""

    source: str
    data: bytes | None = None  # None: it could not be read
    idempotency_key: str | None = None  # None: none sent (a dry run)
    report: ReportView | None = None
    job_id: str = ""
    code: str = ""  # the status of the last failed call, or NOT_SENT
    error: str = ""
    attempts: int = 0

    @property
    def judged(self) -> bool:
        return self.report is not None

    @property
    def unsure(self) -> bool:
        """Whether it may have been admitted without the answer reaching us: the key
        sent again later gets that admission back."""
        return self.code in RETRIED and self.idempotency_key is not None


NOT_SENT = "NOT_SENT"


def documents(paths: list[str]) -> list[Submission]:
    """Each document named, or one not sent for a path that cannot be read: the
    others still go."""
    out: list[Submission] = []
    for path in paths:
        try:
            names = sources.expand([path])
        except OSError as e:
            out.append(Submission(path, code=NOT_SENT, error=str(e)))
            continue
        for name in names:
            try:
                source = sources.read(name, MAX_SEND_BYTES)
                out.append(Submission(source.name, source.data))
            except sources.TooLarge as e:
                out.append(Submission(name, code=NOT_SENT, error=f"{e}, more than a gRPC message can carry"))
            except OSError as e:
                out.append(Submission(name, code=NOT_SENT, error=str(e)))
    return out


def keyed(docs: list[Submission], pinned: str | None) -> None:
    """Gives each readable document its key: `pinned` when it is the only document,
    else a fresh invocation id and its place in the run (the same on every retry)."""
    readable = [d for d in docs if d.data is not None]
    if pinned is not None:
        if len(docs) != 1:
            raise UsageError(f"--idempotency-key names the key of one document; {len(docs)} were given (without it, each gets a key of its own)")
        try:
            size = len(pinned.encode())
        except UnicodeEncodeError:
            raise UsageError("--idempotency-key must be UTF-8 text") from None
        if not pinned or size > MAX_IDEMPOTENCY_KEY_BYTES:
            raise UsageError(f"--idempotency-key must be 1 to {MAX_IDEMPOTENCY_KEY_BYTES} bytes; it is {size}")
        for doc in readable:
            doc.idempotency_key = pinned
        return
    invocation = secrets.token_hex(16)
    for i, doc in enumerate(readable):
        doc.idempotency_key = f"jobgate-submit:{invocation}:{i}"


def send(call, request, metadata, timeout: float, retries: int, doc: Submission, sleep=time.sleep):
    """`call(request)`, sent again after a backoff while it fails with a code of
    RETRIED, `retries` times at most; the last failure is raised."""
    import grpc  # the server extra's, as in `run`

    for attempt in range(retries + 1):
        doc.attempts = attempt + 1
        try:
            return call(request, metadata=metadata, timeout=timeout)
        except grpc.RpcError as e:
            if e.code().name not in RETRIED or attempt == retries:
                raise
            delay = min(MAX_BACKOFF, FIRST_BACKOFF * 2**attempt) * random.uniform(0.5, 1.0)
            if sys.stderr.isatty() and not os.environ.get("CI"):
                print(f"{formats.printable(doc.source)}: {e.code().name}; sending it again in {delay:.1f} s ({attempt + 1} of {retries})", file=sys.stderr)
            sleep(delay)
    raise AssertionError("unreachable")


def send_all(docs: list[Submission], stubs: list, admit) -> None:
    """Each of `docs` sent with `admit(stub, doc)`, which returns why no more should be
    sent, or "". The first goes alone: a server that cannot be reached, or refuses the
    caller, costs one document's attempts. Then each stub (one per connection) carries
    one call at a time, taking the next document as it is free. Once a reason is
    given, the documents not yet sent are NOT_SENT, with it."""
    if not docs:
        return
    gone = admit(stubs[0], docs[0])
    waiting = iter(docs[1:])
    lock = threading.Lock()
    failed: list[Exception] = []

    def sender(stub) -> None:
        nonlocal gone
        while True:
            with lock:
                doc = next(waiting, None)
                if doc is None:
                    return
                if gone:
                    doc.code, doc.error = NOT_SENT, gone
                    continue
            try:
                why = admit(stub, doc)
            except Exception as e:  # noqa: BLE001 - raised again on the caller's thread, once the others stop
                failed.append(e)
                why = "stopped"
            if why:
                with lock:
                    gone = gone or why

    # The first stub's sender runs on this thread and the others on daemon threads:
    # an interrupt reaches this one at once, and the channels closed on the way out
    # end the calls still in flight.
    others = [threading.Thread(target=sender, args=(stub,), daemon=True) for stub in stubs[1:]]
    try:
        for thread in others:
            thread.start()
        sender(stubs[0])
        for thread in others:
            while thread.is_alive():
                thread.join(0.2)
    except BaseException:
        with lock:
            gone = gone or "interrupted"
        raise
    if failed:
        raise failed[0]


def run(args: argparse.Namespace) -> int:
    # Imported here: grpc comes with the server extra, and a command without it
    # must still start to say which extra to install (cli.missing_extra).
    import grpc

    from jobgate.v1 import admission_pb2, admission_pb2_grpc

    if args.retries < 0:
        raise UsageError("--retries must be 0 or more")
    if args.connections < 1:
        raise UsageError("--connections must be at least 1")
    try:
        package = sources.read(args.package).data if args.package else b""
    except OSError as e:
        raise UsageError(str(e)) from None
    docs = documents(args.paths)
    if not args.dry_run:  # dry runs open nothing: nothing to make safe
        keyed(docs, args.idempotency_key)
    metadata = connect.metadata(args)

    def admit(stub, doc: Submission) -> str:
        """Sends `doc`; returns why no other document should be sent, or ""."""
        document = admission_pb2.Document(raw=doc.data, package=package, idempotency_key=doc.idempotency_key or "")
        try:
            response = send(stub.Admit, admission_pb2.AdmitRequest(document=document, dry_run=args.dry_run), metadata, args.timeout, args.retries, doc)
        except grpc.RpcError as e:
            doc.code, doc.error = e.code().name, e.details() or ""
            if e.code() == grpc.StatusCode.UNAVAILABLE:
                return f"{args.server} stayed unavailable ({doc.attempts} attempts for {doc.source})"
            if e.code().name in REFUSED_CALLER:
                return f"{args.server} refused the caller ({doc.code} for {doc.source})"
            return ""
        doc.report, doc.job_id = ReportView.from_message(response.report), response.job_id
        return ""

    readable = [d for d in docs if d.data is not None]
    channels = connect.channels_for(args, max(1, min(args.connections, len(readable))), options=CHANNEL_OPTIONS)
    try:
        send_all(readable, [admission_pb2_grpc.AdmissionServiceStub(c) for c in channels], admit)
    finally:
        for channel in channels:
            channel.close()
    print(formats.submissions(args.format, docs))
    unjudged = [d for d in docs if not d.judged]
    hint = connect.unavailable_hint(args, "UNAVAILABLE") if any(d.code == "UNAVAILABLE" for d in unjudged) else ""
    for d in unjudged:
        print(formats.printable(f"jobgate: {d.source}: {describe(d, args.server, hint if d.code == 'UNAVAILABLE' else '')}"), file=sys.stderr)
    if unjudged:
        return EXIT_ERROR
    return EXIT_PASS if all(d.report.ok for d in docs) else EXIT_FAIL


def describe(doc: Submission, server: str, hint: str = "") -> str:
    """Why a document got no verdict (with `hint`, what would reach the server), and
    how to finish it safely."""
    if doc.code == NOT_SENT:
        return f"not sent: {doc.error}"
    what = f"{server}: {doc.code}: {doc.error}" + (f" (after {doc.attempts} attempts)" if doc.attempts > 1 else "") + hint
    if doc.unsure:
        what += f"; it may have been admitted: sending it again with the same options and --idempotency-key {doc.idempotency_key} gets its job id without admitting it twice"
    return what
