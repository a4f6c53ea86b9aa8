"""Prometheus metrics on an HTTP port: admissions by verdict, violations by rule,
denials by RPC and reason, retries answered by idempotency key, RPC latency, batch
sizes and calls in flight. One registry per server, so several servers in one
process (tests) never collide."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

LATENCY_BUCKETS = (50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.admissions = Counter("jobgate_admissions_total", "Documents judged, by RPC and verdict", ["rpc", "verdict"], registry=self.registry)
        self.violations = Counter("jobgate_violations_total", "Violations reported, by rule and severity", ["rule", "severity"], registry=self.registry)
        self.latency = Histogram("jobgate_rpc_duration_seconds", "RPC handling time", ["rpc"], buckets=LATENCY_BUCKETS, registry=self.registry)
        self.batch_size = Histogram("jobgate_batch_documents", "Documents per AdmitBatch call", buckets=BATCH_BUCKETS, registry=self.registry)
        self.in_flight = Gauge("jobgate_rpcs_in_flight", "RPCs being handled", ["rpc"], registry=self.registry, multiprocess_mode="livesum")
        # reason: unauthenticated, role (PERMISSION_DENIED), project (forge.project.forbidden),
        # not_visible (NOT_FOUND for a job outside the caller's projects). Accounts are in
        # the log line, not in a label: their number is the operator's, not bounded here.
        self.denials = Counter("jobgate_denials_total", "Calls and documents refused for the caller's identity or grant, by RPC and reason", ["rpc", "reason"], registry=self.registry)
        # outcome: replayed (a retry answered with its key's first admission), refused (a
        # key reused by another request, ALREADY_EXISTS).
        self.retries = Counter("jobgate_idempotent_retries_total", "Admissions sent again with an idempotency key, by RPC and outcome", ["rpc", "outcome"], registry=self.registry)
        self.http = None

    def report(self, rpc: str, report) -> None:
        self.admissions.labels(rpc, report.verdict).inc()
        for v in report.violations:
            self.violations.labels(v.rule, v.severity).inc()

    def reports(self, rpc: str, reports) -> None:
        """Counts a batch with one increment per label set, not one per document."""
        verdicts: dict[str, int] = {}
        rules: dict[tuple[str, str], int] = {}
        for r in reports:
            verdicts[r.verdict] = verdicts.get(r.verdict, 0) + 1
            for v in r.violations if r.errors or r.warnings else ():
                rules[(v.rule, v.severity)] = rules.get((v.rule, v.severity), 0) + 1
        self.counts(rpc, verdicts, rules)

    def counts(self, rpc: str, verdicts: dict[str, int], rules: dict[tuple[str, str], int]) -> None:
        """Counts reports per verdict and violations per (rule, severity)."""
        for verdict, n in verdicts.items():
            self.admissions.labels(rpc, verdict).inc(n)
        for (rule, severity), n in rules.items():
            self.violations.labels(rule, severity).inc(n)

    def serve_http(self, listen: str) -> int:
        """Starts the /metrics endpoint; returns its port."""
        host, _, port = listen.rpartition(":")
        self.http, _thread = start_http_server(int(port), addr=host or "127.0.0.1", registry=self.registry)
        return self.http.server_port

    def close(self) -> None:
        if self.http is not None:
            self.http.shutdown()
            self.http = None
