"""Mutual TLS: the account comes from the client certificate; a client without one,
or with one from another CA, cannot call."""

from __future__ import annotations

import datetime
import json

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from jobgate.config import Tls
from jobgate.v1 import admission_pb2, admission_pb2_grpc
from tests.conftest import sample
from tests.server.conftest import Running, config_for


def issue(name: str, issuer=None, *, ca: bool = False, server: bool = False):
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    issuer_cert, issuer_key = issuer or (None, key)
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer_cert.subject if issuer_cert else subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if server:
        builder = builder.add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
    cert = builder.sign(issuer_key, hashes.SHA256())
    pem = cert.public_bytes(serialization.Encoding.PEM)
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    return cert, key, pem, key_pem


@pytest.fixture
def pki(tmp_path):
    ca = issue("jobgate test CA", ca=True)
    other_ca = issue("someone else", ca=True)
    files = {}
    for name, (_cert, _key, pem, key_pem) in {
        "ca": ca,
        "server": issue("localhost", (ca[0], ca[1]), server=True),
        "alice": issue("alice", (ca[0], ca[1])),
        "mallory": issue("mallory", (other_ca[0], other_ca[1])),
    }.items():
        (tmp_path / f"{name}.pem").write_bytes(pem)
        (tmp_path / f"{name}.key").write_bytes(key_pem)
        files[name] = (pem, key_pem)
    return tmp_path, files


def test_account_from_the_client_certificate(pki, tmp_path):
    d, files = pki
    cfg = config_for(tmp_path)
    cfg = cfg.model_copy(update={"server": cfg.server.model_copy(update={"tokens": {}, "tls": Tls(cert=str(d / "server.pem"), key=str(d / "server.key"), client_ca=str(d / "ca.pem"))})})
    r = Running(cfg)
    try:
        doc = admission_pb2.Document(raw=json.dumps({**sample("jobspec.valid.json")}).encode())

        def call(client: str | None):
            creds = grpc.ssl_channel_credentials(files["ca"][0], files[client][1] if client else None, files[client][0] if client else None)
            with grpc.secure_channel(f"localhost:{r.port}", creds) as channel:
                return admission_pb2_grpc.AdmissionServiceStub(channel).Admit(admission_pb2.AdmitRequest(document=doc), timeout=10)

        response = call("alice")
        assert response.job_id
        assert json.loads(r.gate.store.document(response.job_id))["metadata"]["owner"] == "alice"
        for client in (None, "mallory"):
            with pytest.raises(grpc.RpcError) as e:
                call(client)
            assert e.value.code() == grpc.StatusCode.UNAVAILABLE  # the handshake itself is refused
    finally:
        r.close()
