"""docs/configuration.md is generated from the configuration model: every key, with
its type, default and meaning. It must not drift from the model."""

from __future__ import annotations

from pydantic import BaseModel

from jobgate.config import Config, reference
from tests.helpers import ROOT


def test_the_configuration_reference_matches_the_model():
    written = (ROOT / "docs" / "configuration.md").read_text()
    assert written == reference(), "docs/configuration.md is out of date with python/jobgate/config.py: run scripts/dev docs"


def test_every_key_has_a_meaning():
    def missing(model: type[BaseModel], prefix: str) -> list[str]:
        out = []
        for name, field in model.model_fields.items():
            if not field.exclude and not field.description:
                out.append(prefix + name)
        return out

    import typing

    models = [Config]
    seen: set[type] = set()
    gaps: list[str] = []
    while models:
        model = models.pop()
        if model in seen:
            continue
        seen.add(model)
        gaps += missing(model, f"{model.__name__}.")
        for field in model.model_fields.values():
            for candidate in (field.annotation, *typing.get_args(field.annotation), *(a for arg in typing.get_args(field.annotation) for a in typing.get_args(arg))):
                if isinstance(candidate, type) and issubclass(candidate, BaseModel):
                    models.append(candidate)
    assert gaps == []
