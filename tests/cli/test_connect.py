"""The one way every client command connects: TLS options, and a bearer token never
sent in plaintext off loopback without saying so."""

from __future__ import annotations

import argparse

import pytest

from jobgate.cli import UsageError, connect


def args(**kw) -> argparse.Namespace:
    return argparse.Namespace(**{"server": "127.0.0.1:1", "token": None, "ca": None, "cert": None, "key": None, **kw})


@pytest.mark.parametrize(("server", "warned"), [("127.0.0.1:50051", False), ("localhost:50051", False), ("[::1]:50051", False), ("10.0.0.7:50051", True), ("gate.example.com:443", True)])
def test_a_token_in_plaintext_off_loopback_is_said_out_loud(capsys, server, warned):
    connect.channel_for(args(server=server, token="t0k3n")).close()
    err = capsys.readouterr().err
    assert ("in plaintext" in err) is warned
    connect.channel_for(args(server=server)).close()  # no token, nothing to warn about
    assert capsys.readouterr().err == ""


def test_mutual_tls_options_go_together(tmp_path):
    with pytest.raises(UsageError, match="--cert and --key go together"):
        connect.channel_for(args(cert="c.pem"))
    with pytest.raises(UsageError, match="need --ca"):
        connect.channel_for(args(cert="c.pem", key="k.pem"))
    with pytest.raises(UsageError, match="cannot read"):
        connect.channel_for(args(ca=str(tmp_path / "missing.pem")))
    assert connect.metadata(args(token="x")) == [("authorization", "Bearer x")]
