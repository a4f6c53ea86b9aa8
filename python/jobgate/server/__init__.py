"""The gRPC admission service.

Owns the wire: messages in, reports and records out, identity, limits and error
mapping. Must not apply admission rules itself: every document goes to the Rust core.

- `app`: `create_server` (its parts as one `Started`) and `serve`; what a
  configuration must pass to be served; health and reflection
- `service`: the servicers, registered through the generated code
- `wire`: protobuf messages to documents and back (reports, records, AdmitBatch's
  response), idempotency keys and request fingerprints
- `gate`: admission without the wire: quotas, job ids, idempotency, group commits
- `auth` (who is calling), `grants` (what it may do, failing closed, and every
  refusal recorded)
- `errors`: every status with its google.rpc details
- `calls` (request log and call metrics), `metrics` (and the /metrics endpoint),
  `logs` (bounded JSON log lines), `streams` (stream limits, WatchJob wake-ups,
  shutdown)
- `recipes`: RecipeStatus
"""

from jobgate.server.app import create_server, serve

__all__ = ["create_server", "serve"]
