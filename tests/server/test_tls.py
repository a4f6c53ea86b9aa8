"""Mutual TLS: the account comes from the client certificate's common name, with that
account's grant; a certificate naming no account (or an account that has a token) is
UNAUTHENTICATED; a client without one, or with one from another CA, cannot call."""

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
from jobgate.server.auth import token_hash
from jobgate.v1 import admission_pb2, admission_pb2_grpc, jobs_pb2, jobs_pb2_grpc
from tests.helpers import sample
from tests.server.helpers import POLLER, Running, config_for


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
        "ci-reader": issue("ci-reader", (ca[0], ca[1])),
        "stranger": issue("stranger", (ca[0], ca[1])),  # signed by the CA, but no account
        "poller": issue("poller", (ca[0], ca[1])),  # names an account that has a token
        "mallory": issue("mallory", (other_ca[0], other_ca[1])),
    }.items():
        (tmp_path / f"{name}.pem").write_bytes(pem)
        (tmp_path / f"{name}.key").write_bytes(key_pem)
        files[name] = (pem, key_pem)
    return tmp_path, files


# alice and ci-reader are named by their certificates; the poller by its token.
ACCOUNTS = {
    "alice": {"projects": ["my-lab"], "roles": ["submitter"]},
    "ci-reader": {"projects": ["my-lab"], "roles": ["reader"]},
    "poller": {"token": token_hash(POLLER), "roles": ["backend"]},
}


def test_accounts_from_the_client_certificate(pki, tmp_path):
    d, files = pki
    r = Running(config_for(tmp_path, ACCOUNTS, tls=Tls(cert=str(d / "server.pem"), key=str(d / "server.key"), client_ca=str(d / "ca.pem"))))
    try:
        doc = admission_pb2.Document(raw=json.dumps({**sample("jobspec.valid.json")}).encode())

        def channel(client: str | None) -> grpc.Channel:
            creds = grpc.ssl_channel_credentials(files["ca"][0], files[client][1] if client else None, files[client][0] if client else None)
            return grpc.secure_channel(f"localhost:{r.port}", creds)

        def admit(client: str | None, **kwargs):
            with channel(client) as c:
                return admission_pb2_grpc.AdmissionServiceStub(c).Admit(admission_pb2.AdmitRequest(document=doc), timeout=10, **kwargs)

        def failure(call) -> grpc.RpcError:
            with pytest.raises(grpc.RpcError) as e:
                call()
            return e.value

        response = admit("alice")
        assert response.job_id
        assert json.loads(r.store.document(response.job_id))["metadata"]["owner"] == "alice"
        # the reader's certificate carries the reader's grant
        with channel("ci-reader") as c:
            jobs = jobs_pb2_grpc.JobServiceStub(c)
            assert [j.id for j in jobs.ListJobs(jobs_pb2.ListJobsRequest(), timeout=10).jobs] == [response.job_id]
            e = failure(lambda: admission_pb2_grpc.AdmissionServiceStub(c).Admit(admission_pb2.AdmitRequest(document=doc), timeout=10))
            assert (e.code(), e.details()) == (grpc.StatusCode.PERMISSION_DENIED, "Admit needs the role submitter or admin; account 'ci-reader' holds reader")
            e = failure(lambda: jobs.MarkJob(jobs_pb2.MarkJobRequest(job_id=response.job_id, state="COMPLETE", source="agent"), timeout=10))
            assert e.code() == grpc.StatusCode.PERMISSION_DENIED
        # a certificate the CA signed, naming no account, or naming an account that has a token
        for client, name in (("stranger", "stranger"), ("poller", "poller")):
            e = failure(lambda client=client: admit(client))
            assert (e.code(), e.details()) == (grpc.StatusCode.UNAUTHENTICATED, f"the client certificate names {name!r}, which is not an account of this server authenticated by certificate")
        # a token account under mutual TLS: the token names it, whatever certificate carries it
        with channel("stranger") as c:
            request = jobs_pb2.MarkJobRequest(job_id=response.job_id, state="RUNNING", source="poller")
            marked = jobs_pb2_grpc.JobServiceStub(c).MarkJob(request, metadata=[("authorization", f"Bearer {POLLER}")], timeout=10)
        assert [t.state for t in marked.job.transitions] == ["PENDING", "RUNNING"]
        for client in (None, "mallory"):
            e = failure(lambda client=client: admit(client))
            assert e.code() == grpc.StatusCode.UNAVAILABLE  # the handshake itself is refused
    finally:
        r.close()


def test_the_jobs_command_speaks_mutual_tls(pki, tmp_path, capsys):
    from jobgate.cli import main

    d, files = pki
    r = Running(config_for(tmp_path, ACCOUNTS, tls=Tls(cert=str(d / "server.pem"), key=str(d / "server.key"), client_ca=str(d / "ca.pem"))))
    try:
        creds = grpc.ssl_channel_credentials(files["ca"][0], files["alice"][1], files["alice"][0])
        with grpc.secure_channel(f"localhost:{r.port}", creds) as c:
            doc = admission_pb2.Document(raw=json.dumps(sample("jobspec.valid.json")).encode())
            job_id = admission_pb2_grpc.AdmissionServiceStub(c).Admit(admission_pb2.AdmitRequest(document=doc), timeout=10).job_id
        tls = ["--server", f"localhost:{r.port}", "--ca", str(d / "ca.pem"), "--cert", str(d / "ci-reader.pem"), "--key", str(d / "ci-reader.key")]
        capsys.readouterr()
        assert main(["jobs", "list", *tls, "--format", "json"]) == 0
        assert [j["id"] for j in json.loads(capsys.readouterr().out)] == [job_id]
        # without the client certificate the handshake is refused: a clear exit 2
        assert main(["jobs", "list", "--server", f"localhost:{r.port}", "--ca", str(d / "ca.pem")]) == 2
        assert "UNAVAILABLE" in capsys.readouterr().err
    finally:
        r.close()


def test_submit_and_bench_speak_mutual_tls(pki, tmp_path, capsys):
    from jobgate.cli import main

    d, _files = pki
    r = Running(config_for(tmp_path, ACCOUNTS, tls=Tls(cert=str(d / "server.pem"), key=str(d / "server.key"), client_ca=str(d / "ca.pem"))))
    try:
        job = tmp_path / "job.json"
        job.write_text(json.dumps(sample("jobspec.valid.json")))
        tls = ["--server", f"localhost:{r.port}", "--ca", str(d / "ca.pem"), "--cert", str(d / "alice.pem"), "--key", str(d / "alice.key")]
        capsys.readouterr()
        assert main(["submit", str(job), *tls, "--format", "json"]) == 0
        (submitted,) = json.loads(capsys.readouterr().out)["results"]
        assert submitted["verdict"] == "pass" and submitted["job_id"]
        assert json.loads(r.store.document(submitted["job_id"]))["metadata"]["owner"] == "alice"
        assert main(["bench", *tls, "--requests", "20", "--concurrency", "2", "--warmup", "0", "--format", "json"]) == 0
        measured = json.loads(capsys.readouterr().out)
        assert measured["calls"] == 20 and measured["statuses"] == {"OK": 20} and measured["parameters"]["tls"] is True
        # plaintext against the TLS port: a clear exit 2 from each, no traceback
        for command in (["submit", str(job), "--retries", "0"], ["bench", "--requests", "2"]):
            assert main([*command, "--server", f"localhost:{r.port}"]) == 2
            assert "Traceback" not in capsys.readouterr().err
    finally:
        r.close()


def test_a_client_without_ca_is_told_the_server_speaks_tls(pki, tmp_path, capsys):
    """gRPC answers a plaintext client of a TLS server with UNAVAILABLE "Socket
    closed"; the commands add what to do. A server that is not there gets no such hint."""
    from jobgate.cli import main
    from tests.helpers import free_port
    from tests.server.helpers import TOKEN

    d, _files = pki
    job = tmp_path / "job.json"
    job.write_text(json.dumps(sample("jobspec.valid.json")))
    hint = "speaks TLS: give --ca FILE, the CA that signed its certificate (and --cert and --key where it asks for a client certificate)"
    for client_ca in (None, str(d / "ca.pem")):  # TLS, then mutual TLS
        r = Running(config_for(tmp_path, {"alice": {"token": token_hash(TOKEN), "projects": ["my-lab"], "roles": ["submitter"]}}, tls=Tls(cert=str(d / "server.pem"), key=str(d / "server.key"), client_ca=client_ca)))
        server = ["--server", f"localhost:{r.port}", "--timeout", "10"]
        try:
            capsys.readouterr()
            assert main(["jobs", "list", *server]) == 2
            err = capsys.readouterr().err
            assert err.startswith(f"jobgate: localhost:{r.port}: UNAVAILABLE: ") and err.rstrip().endswith(f"; localhost:{r.port} {hint}"), err
            assert main(["submit", str(job), *server, "--retries", "0", "--token", TOKEN]) == 2
            err = capsys.readouterr().err
            assert "UNAVAILABLE: " in err and f"localhost:{r.port} {hint}" in err, err
            if client_ca is None:  # given the CA, the same call goes through
                assert main(["submit", str(job), *server, "--ca", str(d / "ca.pem"), "--token", TOKEN, "--dry-run"]) == 0
        finally:
            r.close()
    nobody = f"127.0.0.1:{free_port()}"
    capsys.readouterr()
    assert main(["jobs", "list", "--server", nobody, "--timeout", "5"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"jobgate: {nobody}: UNAVAILABLE") and "TLS" not in err, err
