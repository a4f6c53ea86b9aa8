"""Identity: who is calling. A bearer token checked against the token hashes of
`[accounts.NAME]`; the common name of a verified client certificate (mutual TLS),
naming an account that has no token; or, where the configuration allows it (on
loopback only), the account "anonymous".

Every call is resolved against the accounts in force when it arrives: a reload
applies to the next call, and a token it revokes fails at once. Must not decide what
an account may do (`grants`), and never holds a token in the clear.
"""

from __future__ import annotations

import hashlib
import secrets
import weakref
from contextvars import ContextVar

import grpc

from jobgate.config import Config
from jobgate.server.grants import Caller, Denials

# Random bytes in a token made by `jobgate token new`: 256 bits, as the hash.
TOKEN_BYTES = 32


class Directory:
    """The accounts of one configuration, as callers, looked up by credential. Never
    changed once built: a reload builds another and swaps it in whole."""

    def __init__(self, config: Config) -> None:
        home = config.jobs.default_project
        # hash -> caller (`by_token`).
        self._by_hash = {a.token.removeprefix("sha256:"): Caller.of(name, a, home) for name, a in config.accounts.items() if a.token is not None}
        # Only an account without a token is named by a certificate: a token account
        # authenticates by its token alone.
        self._by_certificate = {name: Caller.of(name, a, home) for name, a in config.accounts.items() if a.token is None}
        self.anonymous = Caller.anonymous(home) if config.server.allow_anonymous else None
        # Without TLS no call carries a certificate: its auth context is not asked for.
        self.certificates = config.server.tls is not None

    def by_token(self, token: str) -> Caller | None:
        # Looked up by the token's SHA-256, never by the token: how long a lookup takes
        # tells nothing of a token, whose hash an attacker cannot choose.
        return self._by_hash.get(hashlib.sha256(token.encode(errors="replace")).hexdigest())

    def by_certificate(self, name: str) -> Caller | None:
        return self._by_certificate.get(name)


# The last call resolved in this context (gRPC gives each call a context of its own),
# its directory and what it resolved to. The call is held weakly: grpcio's call state
# holds the context the variable lives in, and a strong reference back would make
# every call a reference cycle, kept (with its C call) until the garbage collector
# runs, whose pauses then stall every call in flight.
_resolved: ContextVar[tuple[weakref.ref, Directory, tuple[Caller | None, str]] | None] = ContextVar("jobgate_resolved", default=None)


class Authenticator:
    def __init__(self, config: Config, denials: Denials) -> None:
        self.denials = denials
        self.reload(config)

    def reload(self, config: Config) -> None:
        """Swaps in the accounts of `config` (checked by the caller: `app.check_startable`)."""
        self._directory = Directory(config)

    def caller(self, context: grpc.ServicerContext, rpc: str) -> Caller:
        """The caller of `rpc`, or aborts the call with UNAUTHENTICATED (a denial)."""
        caller, refusal = self._resolve(context)
        if caller is None:
            self.denials.unauthenticated(context, rpc, refusal)
        return caller

    def identify(self, context: grpc.ServicerContext) -> str | None:
        """The caller's account when its credentials are good, else None; never aborts
        (the stream limits count a stream before its handler authenticates it)."""
        caller, _ = self._resolve(context)
        return caller.name if caller is not None else None

    def _resolve(self, context: grpc.ServicerContext) -> tuple[Caller | None, str]:
        directory = self._directory  # one configuration for the whole lookup
        # A call is resolved once per configuration: its servicer, its log line and
        # the stream limits ask alike. A reload (another directory) resolves it anew.
        known = _resolved.get()
        if known is not None and known[0]() is context and known[1] is directory:
            return known[2]
        found = self._lookup(context, directory)
        _resolved.set((weakref.ref(context), directory, found))
        return found

    def _lookup(self, context: grpc.ServicerContext, directory: Directory) -> tuple[Caller | None, str]:
        header = ""
        for key, value in context.invocation_metadata() or ():
            if key == "authorization":
                header = value if isinstance(value, str) else value.decode(errors="replace")
                break
        if header:
            scheme, _, token = header.partition(" ")
            if scheme.lower() != "bearer" or not token:
                return None, "the authorization metadata must be 'Bearer <token>'"
            caller = directory.by_token(token.strip())
            return (caller, "") if caller is not None else (None, "the bearer token is not known to this server")
        # Mutual TLS: the verified client certificate names the account.
        names = (context.auth_context().get("x509_common_name") or []) if directory.certificates else ()
        if names:
            name = names[0].decode(errors="replace") if isinstance(names[0], bytes) else names[0]
            caller = directory.by_certificate(name)
            if caller is None:
                return None, f"the client certificate names {name!r}, which is not an account of this server authenticated by certificate"
            return caller, ""
        if directory.anonymous is not None:
            return directory.anonymous, ""
        return None, "this server needs a bearer token in the authorization metadata"


def token_hash(token: str) -> str:
    """What goes into `[accounts.NAME] token` for a token."""
    return "sha256:" + hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    """A fresh bearer token: `jg_` and 256 random bits, URL-safe."""
    return "jg_" + secrets.token_urlsafe(TOKEN_BYTES)
