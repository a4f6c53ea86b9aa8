"""The grants table fails closed: every RPC of the protos (and of health and reflection)
is named in it, and an RPC it does not name is refused to every role, admin and
anonymous included, on a real server, before its handler runs."""

from __future__ import annotations

import importlib
import logging
import pkgutil

import grpc
import pytest
from google.protobuf import descriptor_pool
from grpc_health.v1 import health_pb2
from grpc_reflection.v1alpha import reflection_pb2
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

import jobgate.server.app
import jobgate.v1
from jobgate.server import grants
from jobgate.server.app import REFLECTION_V1
from jobgate.server.auth import token_hash
from tests.server.helpers import Running, bearer, config_for

ROLES = ("submitter", "reader", "backend", "admin")
ACCOUNTS = {role: {"token": token_hash(f"token-of-{role}"), "projects": ["my-lab"], "roles": [role]} for role in ROLES}


def rpcs_of(file_descriptor) -> set[str]:
    return {f"{service.full_name}/{method.name}" for service in file_descriptor.services_by_name.values() for method in service.methods}


def rpcs_of_the_protos() -> set[str]:
    """Every RPC the server serves, from the descriptors: jobgate.v1's services, health,
    and reflection (v1alpha, and v1 under the same methods)."""
    found = set()
    for module in pkgutil.iter_modules(jobgate.v1.__path__):
        if module.name.endswith("_pb2"):
            found |= rpcs_of(importlib.import_module(f"jobgate.v1.{module.name}").DESCRIPTOR)
    reflection = rpcs_of(reflection_pb2.DESCRIPTOR)
    return found | rpcs_of(health_pb2.DESCRIPTOR) | reflection | {m.replace("grpc.reflection.v1alpha.ServerReflection", REFLECTION_V1) for m in reflection}


def test_every_rpc_of_the_protos_and_of_the_server_is_named_in_the_grants_table(tmp_path):
    protos = rpcs_of_the_protos()
    assert {m.rpartition("/")[0] for m in protos} >= {"jobgate.v1.AdmissionService", "jobgate.v1.JobService", "grpc.health.v1.Health", REFLECTION_V1}
    assert sorted(protos - set(grants.NEEDS)) == []  # each RPC is named
    assert sorted(set(grants.NEEDS) - protos) == []  # and the table names nothing else
    # What the running server serves, as its reflection lists it, is that same set.
    r = Running(config_for(tmp_path))
    try:
        listed = ProtoReflectionDescriptorDatabase(r.channel)
        pool = descriptor_pool.DescriptorPool(listed)
        # v1 reflection is v1alpha's service under another name (its descriptor is not served)
        described = {name: pool.FindServiceByName("grpc.reflection.v1alpha.ServerReflection" if name == REFLECTION_V1 else name) for name in listed.get_services()}
        served = {f"{name}/{method.name}" for name, service in described.items() for method in service.methods}
    finally:
        r.close()
    assert served == protos
    # Open to every caller: health and reflection, and nothing else.
    assert {m for m, needs in grants.NEEDS.items() if needs == grants.OPEN} == {m for m in protos if m.startswith(("grpc.health.", "grpc.reflection."))}
    assert all(needs == grants.OPEN or set(needs) <= set(ROLES) for needs in grants.NEEDS.values())


UNNAMED = "jobgate.v1.JobService/PurgeJobs"
UNNAMED_STREAM = "jobgate.v1.JobService/TailJobs"


def test_an_rpc_the_grants_table_does_not_name_is_refused_to_every_role(tmp_path, monkeypatch, caplog):
    ran = []

    def with_unnamed(server, *servicers):  # a new RPC served, its entry in NEEDS forgotten
        names = add_servicers(server, *servicers)
        handlers = {
            "PurgeJobs": grpc.unary_unary_rpc_method_handler(lambda request, context: ran.append("PurgeJobs") or b"purged"),
            "TailJobs": grpc.unary_stream_rpc_method_handler(lambda request, context: iter(ran.append("TailJobs") or [b"line"])),
        }
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("jobgate.v1.JobService", handlers),))
        return names

    add_servicers = jobgate.server.app.add_servicers
    monkeypatch.setattr(jobgate.server.app, "add_servicers", with_unnamed)
    r = Running(config_for(tmp_path, ACCOUNTS, allow_anonymous=True))  # without credentials: anonymous, an admin
    try:
        purge = r.channel.unary_unary(f"/{UNNAMED}", request_serializer=None, response_deserializer=None)
        tail = r.channel.unary_stream(f"/{UNNAMED_STREAM}", request_serializer=None, response_deserializer=None)
        callers = {role: bearer(f"token-of-{role}") for role in ROLES} | {"anonymous": None}
        with caplog.at_level(logging.WARNING, logger="jobgate.server"):
            for who, metadata in callers.items():
                for method, call in ((UNNAMED, lambda md: purge(b"", metadata=md, timeout=10)), (UNNAMED_STREAM, lambda md: list(tail(b"", metadata=md, timeout=10)))):
                    with pytest.raises(grpc.RpcError) as refused:
                        call(metadata)
                    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED, (who, method)
                    assert refused.value.details() == f"{method} is not named in this server's grants table: it is refused to every role"
        assert ran == []  # no handler ran
        denied = [rec.fields for rec in caplog.records if rec.getMessage() == "denied"]
        assert [(d["account"], d["rpc"], d["reason"]) for d in denied] == [(who, rpc, "role") for who in ("submitter", "reader", "backend", "admin", "anonymous") for rpc in ("PurgeJobs", "TailJobs")]
        assert r.metrics.registry.get_sample_value("jobgate_denials_total", {"rpc": "PurgeJobs", "reason": "role"}) == 5
    finally:
        r.close()
    # Whatever the caller holds, the grants allow no RPC the table does not name.
    everyone = grants.Caller("root", frozenset(ROLES), ("*",), "my-lab")
    assert not any(everyone.may(m) for m in (UNNAMED, UNNAMED_STREAM, "GetJob", "jobgate.v1.JobService/"))
    assert all(everyone.may(m) for m in grants.NEEDS)
