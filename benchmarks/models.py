"""A pydantic model of the TAO spec-bundle, the way a Python service would write it:
the published schema's structure and mode rules. A peer for the benchmark only."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Strict(BaseModel):
    # The published path pattern uses look-ahead, which needs Python's regex engine.
    model_config = ConfigDict(extra="forbid", regex_engine="python-re")


class DeclaredInput(_Strict):
    spec_key: str = Field(min_length=1)
    type: Literal["file", "folder"]
    optional: bool = False
    uri: str = Field(min_length=1)


class DeclaredOutput(_Strict):
    spec_key: str = Field(min_length=1)
    type: Literal["file", "folder"]


class ComputeShape(_Strict):
    gpus: int = Field(ge=0)
    nodes: int = Field(ge=1)


class SupportingFile(_Strict):
    source: str = Field(min_length=1, pattern=r"^(?!/)(?!.*(?:^|/)\.\.(?:/|$))\S+$")
    destination: str = Field(min_length=1, pattern=r"^(?!/)(?!.*(?:^|/)\.\.(?:/|$))\S+$")
    sha256: str = Field(pattern=r"^[a-f0-9]{64}$")


class Distributed(_Strict):
    launcher: Literal["direct", "torchrun"]
    processes_per_node: int = Field(ge=1)
    tasks_per_node: Literal[1] = 1


class Completion(_Strict):
    child_exit_code_path: str = Field(min_length=1)
    structured_status_path: str | None = Field(None, min_length=1)
    success_states: list[str] | None = None


class Execution(_Strict):
    environment: dict[str, str] | None = None
    pre_commands: list[str] | None = None
    post_commands: list[str] | None = None
    post_scope: Literal["all", "leader"] = "leader"
    distributed: Distributed | None = None
    supporting_files: list[SupportingFile] | None = None
    completion: Completion | None = None


def _no_dots(value: Any) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            if not k or "." in k:
                raise ValueError(f"dotted key {k!r}")
            _no_dots(v)
    elif isinstance(value, list):
        for v in value:
            _no_dots(v)


class SpecBundle(_Strict):
    network_arch: str = Field(min_length=1)
    action: str = Field(min_length=1)
    image: str = Field(pattern=r"^\S+/\S+$")
    mode: Literal["config", "args"]
    command: str = Field(min_length=1)
    config_format: Literal["yaml", "toml", "json"] | None = None
    spec: dict[str, Any] | None = None
    args: list[str] | None = None
    declared_inputs: list[DeclaredInput]
    declared_outputs: list[DeclaredOutput] = Field(min_length=1)
    upload_excludes: list[str] | None = None
    compute_shape: ComputeShape
    gpu_spec_key: str | None = None
    execution: Execution | None = None

    @model_validator(mode="after")
    def _modes(self) -> SpecBundle:
        if self.mode == "config":
            if self.spec is None or self.config_format is None or self.args is not None or "{config_path}" not in self.command:
                raise ValueError("mode config")
        elif self.args is None or self.spec is not None or self.config_format is not None:
            raise ValueError("mode args")
        _no_dots(self.spec)
        return self
