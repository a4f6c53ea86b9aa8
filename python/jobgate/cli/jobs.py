"""`jobgate jobs list|show|mark`: the job records, in the local store or through a
running service (--server)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from jobgate import Validator, load_config, rollout
from jobgate.cli import connect, streaming
from jobgate.cli.formats import printable
from jobgate.cli.usage import EXIT_FAIL, EXIT_PASS, UsageError, named_files
from jobgate.config import environment_config
from jobgate.store import JobNotFound, RecordFull, StoreFull, StoreUnavailable, TerminalState, Unstorable, open_store
from jobgate.store.base import ERR_CLASSES, SOURCES, STATES

AUDIT_PAGE = 500  # jobs listed, read and judged at a time by `jobs audit`


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("jobs", help="list, show and mark job records", description=__doc__)
    jobs = p.add_subparsers(dest="jobs_command", metavar="ACTION", required=True)

    def local(q: argparse.ArgumentParser, where: argparse._ActionsContainer) -> None:
        where.add_argument("--store", metavar="DIR", help="the local store directory (default: store.path of --config, or ./.jobgate)")
        q.add_argument("--config", metavar="FILE", help="jobgate.toml (for store.path or store.url; JOBGATE_STORE__PATH and JOBGATE_STORE__URL override it)")

    def common(q: argparse.ArgumentParser) -> None:
        where = q.add_mutually_exclusive_group()
        local(q, where)
        where.add_argument("--server", metavar="ADDR", help="a running service instead of the local store")
        connect.add_options(q, server_default=None)

    ls = jobs.add_parser("list", help="records, oldest first")
    common(ls)
    ls.add_argument("--state", choices=STATES)
    ls.add_argument("--project")
    ls.add_argument("--owner")
    done = ls.add_mutually_exclusive_group()
    done.add_argument("--terminal", action="store_true", help="only finished jobs")
    done.add_argument("--active", action="store_true", help="only unfinished jobs")
    ls.add_argument("--limit", type=int, default=50)
    ls.add_argument("--format", choices=("text", "json"), default="text")
    ls.set_defaults(run=run_list)

    show = jobs.add_parser("show", help="one record")
    common(show)
    show.add_argument("job_id", metavar="ID")
    show.add_argument("--format", choices=("job-record", "text"), default="job-record", help="job-record: the TAO job-record JSON (default)")
    show.set_defaults(run=run_show)

    # The admitted documents are read from the store itself: no service answers for them.
    audit = jobs.add_parser("audit", help="judge the admitted documents of unfinished jobs under a candidate configuration: which would it refuse?")
    local(audit, audit)
    audit.add_argument("--against", required=True, metavar="CANDIDATE.toml", help="the candidate configuration; the current one is --config")
    audit.add_argument("--format", choices=("text", "json", "jsonl"), default="text", help="jsonl: one JSON object per changed job, no counts")
    audit.add_argument("--fail-on", choices=("error", "warning"), default="error", help="exit 1 when a job would newly fail (default), or gain any violation")
    audit.set_defaults(run=run_audit)

    mark = jobs.add_parser("mark", help="append a transition")
    common(mark)
    mark.add_argument("job_id", metavar="ID")
    mark.add_argument("state", choices=STATES)
    mark.add_argument("--message", default="")
    mark.add_argument("--source", choices=SOURCES, default="agent")
    mark.add_argument("--backend-ref", default="")
    mark.add_argument("--err-class", choices=ERR_CLASSES, default="")
    mark.set_defaults(run=run_mark)


class Local:
    def __init__(self, args: argparse.Namespace) -> None:
        config = load_config(args.config) if args.config else environment_config()
        path = args.store or (config.store.path if config else "./.jobgate")
        url = None if args.store else config.store.url if config else None
        if not url and not os.path.isdir(path):  # reading never creates a store
            raise UsageError(f"no job store at {path} (--store, or store.path of --config)")
        # The same bounds as the service: what is marked here is stored as it would be there.
        bounds = {"max_message_bytes": config.limits.max_message_bytes, "max_transitions": config.limits.max_transitions} if config else {}
        self.store = open_store(path, url, **bounds)

    def list(self, args) -> list[dict[str, Any]]:
        terminal = True if args.terminal else False if args.active else None
        rows = self.store.list(state=args.state or "", project=args.project or "", owner=args.owner or "", terminal=terminal, limit=args.limit)
        return [{k: v for k, v in r.items() if not k.startswith("_")} for r in rows]

    def show(self, job_id: str) -> dict[str, Any]:
        return self.store.get(job_id)

    def mark(self, args) -> dict[str, Any]:
        return self.store.mark(args.job_id, args.state, args.message, args.source, args.backend_ref, args.err_class)

    def project(self, job_id: str) -> str:
        return self.store.project(job_id)


class Remote:
    """The records through a running service. Its methods import the gRPC and protobuf
    modules they use: those come with the server extra, and a command without it must
    still start to say which extra to install (cli.missing_extra)."""

    def __init__(self, args: argparse.Namespace) -> None:
        from jobgate.v1 import jobs_pb2_grpc

        self.channel = connect.channel_for(args)
        self.stub = jobs_pb2_grpc.JobServiceStub(self.channel)
        self.metadata = connect.metadata(args)
        self.timeout = args.timeout

    @staticmethod
    def _dict(message) -> dict[str, Any]:
        from google.protobuf import json_format

        return json_format.MessageToDict(message)

    def list(self, args) -> list[dict[str, Any]]:
        from jobgate.v1 import jobs_pb2

        request = jobs_pb2.ListJobsRequest(state=args.state or "", project=args.project or "", owner=args.owner or "", page_size=min(args.limit, 1000))
        if args.terminal or args.active:
            request.terminal = bool(args.terminal)
        return [self._dict(j) for j in self.stub.ListJobs(request, metadata=self.metadata, timeout=self.timeout).jobs]

    def show(self, job_id: str) -> dict[str, Any]:
        from jobgate.v1 import jobs_pb2

        return self._dict(self.stub.GetJob(jobs_pb2.GetJobRequest(job_id=job_id), metadata=self.metadata, timeout=self.timeout).job)

    def mark(self, args) -> dict[str, Any]:
        from jobgate.v1 import jobs_pb2

        request = jobs_pb2.MarkJobRequest(job_id=args.job_id, state=args.state, message=args.message, source=args.source, backend_ref=args.backend_ref, err_class=args.err_class)
        return self._dict(self.stub.MarkJob(request, metadata=self.metadata, timeout=self.timeout).job)

    def project(self, job_id: str) -> str:
        return ""  # a JobRecord message carries no project: the service does not say


def _backend(args: argparse.Namespace):
    return Remote(args) if args.server else Local(args)


def _errors(fn):
    """Store and RPC failures as one line and exit code 2 (unknown id, terminal state)."""

    def run(args: argparse.Namespace) -> int:
        try:
            return fn(args)
        except UsageError:
            raise
        except JobNotFound as e:
            raise UsageError(f"no job {e.args[0]!r}") from None
        except (TerminalState, RecordFull, StoreFull, StoreUnavailable, Unstorable, ValueError) as e:
            raise UsageError(str(e)) from None
        except Exception as e:
            if getattr(args, "server", None):  # only a remote call raises gRPC's errors (and needs grpc installed)
                import grpc

                if isinstance(e, grpc.RpcError):
                    raise UsageError(f"{args.server}: {e.code().name}: {e.details()}{connect.unavailable_hint(args, e.code().name)}") from None
            raise

    return run


COLUMNS = ("ID", "STATE", "PROJECT", "SUBMITTED", "JOB", "MESSAGE")


def _table(jobs: list[tuple[dict[str, Any], str]]) -> str:
    """Jobs (each record with its project, "" where unknown) as a table under a header
    row, columns aligned, the last transition's message last; what a document or a
    backend wrote is shown `printable`."""
    rows = [COLUMNS]
    for r, project in jobs:
        last = r["transitions"][-1] if r.get("transitions") else {}
        cells = (r.get("id", ""), last.get("state", "?"), project or "-", r.get("submitted_at", ""), f"{r.get('network_arch', '')}/{r.get('action', '')}", last.get("message", ""))
        rows.append(tuple(printable(str(cell)) for cell in cells))
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS) - 1)]
    return "\n".join(("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False)) + "  " + row[-1]).rstrip() for row in rows)


@_errors
def run_list(args: argparse.Namespace) -> int:
    backend = _backend(args)
    rows = backend.list(args)
    if args.format == "json":
        print(json.dumps(rows, indent=2, ensure_ascii=False))
    else:
        print(_table([(r, backend.project(r["id"])) for r in rows]) if rows else "no jobs")
    return 0


@_errors
def run_show(args: argparse.Namespace) -> int:
    backend = _backend(args)
    record = backend.show(args.job_id)
    if args.format == "job-record":
        print(json.dumps(record, indent=2, ensure_ascii=False))
    else:
        print(_table([(record, backend.project(args.job_id))]))
        for t in record["transitions"]:
            print(printable(f"  {t['ts']}  {t['state']:<9} {t['source']:<12} {t['message']}"))
    return 0


@_errors
def run_mark(args: argparse.Namespace) -> int:
    backend = _backend(args)
    record = backend.mark(args)
    print(_table([(record, backend.project(args.job_id))]))
    return 0


@_errors
def run_audit(args: argparse.Namespace) -> int:
    """Gatekeeper's audit: every unfinished job's admitted document, judged under the
    current configuration and the candidate; the jobs judged otherwise are shown."""
    named_files(args.against)
    current = Validator(load_config(args.config) if args.config else environment_config())
    candidate = Validator(load_config(args.against))
    store = Local(args).store
    # A page of jobs at a time, judged on every core and written before the next is
    # read: memory does not grow with the store, as Gatekeeper's audit lists its
    # cluster in chunks.
    stream = streaming.ChangesStream(args.format, sys.stdout)
    impact = rollout.Impact()
    after_seq = ""
    while True:
        rows = store.list(state="", project="", owner="", terminal=False, limit=AUDIT_PAGE, after=after_seq)
        ids = [row["id"] for row in rows]
        documents = [store.document(job_id) for job_id in ids]
        # The project a job was admitted into (a spec-bundle's too), read for the jobs that change.
        changes = rollout.compare_reports(ids, current.check_many(documents), candidate.check_many(documents), lambda i, ids=ids: store.project(ids[i]))
        for c in changes:
            impact.add(c)
        impact.items += len(ids)
        stream.write(changes)
        if len(rows) < AUDIT_PAGE:
            break
        after_seq = str(rows[-1]["_seq"])
    stream.close(impact.to_dict())
    return EXIT_FAIL if impact.fails(args.fail_on) else EXIT_PASS
