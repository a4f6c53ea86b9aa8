"""The gRPC admission service.

Owns the wire: messages in, reports and records out, identity, limits and error
mapping. Must not apply admission rules itself: every document goes to the Rust core.
"""

from jobgate.server.app import create_server, serve

__all__ = ["create_server", "serve"]
