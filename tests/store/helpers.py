"""The test server's configuration on either store backend."""

from __future__ import annotations

from tests.server.helpers import config_for


def config_on(backend, tmp_path, accounts: dict | None = None, **server):
    """The test server's configuration, its store on `backend` ((store.path, store.url),
    from the `backend` fixture)."""
    path, url = backend
    config = config_for(tmp_path, accounts, **server)
    return config.model_copy(update={"store": config.store.model_copy(update={"path": path, "url": url})})
