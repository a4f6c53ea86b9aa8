"""Identity: bearer tokens checked against the hashes in the configuration, or
anonymous access where the configuration allows it (local demos only)."""

from __future__ import annotations

import hashlib
import hmac

import grpc

ANONYMOUS = "anonymous"


class Authenticator:
    def __init__(self, tokens: dict[str, str], allow_anonymous: bool) -> None:
        self.reload(tokens, allow_anonymous)

    def reload(self, tokens: dict[str, str], allow_anonymous: bool) -> None:
        # hash -> account; compared in constant time below.
        self._by_hash = {digest.removeprefix("sha256:"): account for account, digest in tokens.items()}
        self.allow_anonymous = allow_anonymous

    def account(self, context: grpc.ServicerContext) -> str:
        """The caller's account, or aborts the call with UNAUTHENTICATED."""
        header = ""
        for key, value in context.invocation_metadata():
            if key == "authorization":
                header = value if isinstance(value, str) else value.decode()
                break
        if header:
            scheme, _, token = header.partition(" ")
            if scheme.lower() != "bearer" or not token:
                context.abort(grpc.StatusCode.UNAUTHENTICATED, "the authorization metadata must be 'Bearer <token>'")
            digest = hashlib.sha256(token.strip().encode()).hexdigest()
            for known, account in self._by_hash.items():
                if hmac.compare_digest(known, digest):
                    return account
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "the bearer token is not known to this server")
        # Mutual TLS: the verified client certificate names the account.
        names = context.auth_context().get("x509_common_name") or []
        if names:
            name = names[0]
            return name.decode() if isinstance(name, bytes) else name
        if self.allow_anonymous:
            return ANONYMOUS
        context.abort(grpc.StatusCode.UNAUTHENTICATED, "this server needs a bearer token in the authorization metadata")
        raise AssertionError("unreachable")


def token_hash(token: str) -> str:
    """What goes into `[server.tokens]` for a token."""
    return "sha256:" + hashlib.sha256(token.encode()).hexdigest()
