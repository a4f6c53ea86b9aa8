from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SpecBundle(_message.Message):
    __slots__ = ("network_arch", "action", "image", "mode", "command", "config_format", "spec", "args", "declared_inputs", "declared_outputs", "upload_excludes", "compute_shape", "gpu_spec_key", "execution")
    NETWORK_ARCH_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FORMAT_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    ARGS_FIELD_NUMBER: _ClassVar[int]
    DECLARED_INPUTS_FIELD_NUMBER: _ClassVar[int]
    DECLARED_OUTPUTS_FIELD_NUMBER: _ClassVar[int]
    UPLOAD_EXCLUDES_FIELD_NUMBER: _ClassVar[int]
    COMPUTE_SHAPE_FIELD_NUMBER: _ClassVar[int]
    GPU_SPEC_KEY_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_FIELD_NUMBER: _ClassVar[int]
    network_arch: str
    action: str
    image: str
    mode: str
    command: str
    config_format: str
    spec: _struct_pb2.Struct
    args: _containers.RepeatedScalarFieldContainer[str]
    declared_inputs: _containers.RepeatedCompositeFieldContainer[DeclaredInput]
    declared_outputs: _containers.RepeatedCompositeFieldContainer[DeclaredOutput]
    upload_excludes: _containers.RepeatedScalarFieldContainer[str]
    compute_shape: ComputeShape
    gpu_spec_key: str
    execution: Execution
    def __init__(self, network_arch: _Optional[str] = ..., action: _Optional[str] = ..., image: _Optional[str] = ..., mode: _Optional[str] = ..., command: _Optional[str] = ..., config_format: _Optional[str] = ..., spec: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., args: _Optional[_Iterable[str]] = ..., declared_inputs: _Optional[_Iterable[_Union[DeclaredInput, _Mapping]]] = ..., declared_outputs: _Optional[_Iterable[_Union[DeclaredOutput, _Mapping]]] = ..., upload_excludes: _Optional[_Iterable[str]] = ..., compute_shape: _Optional[_Union[ComputeShape, _Mapping]] = ..., gpu_spec_key: _Optional[str] = ..., execution: _Optional[_Union[Execution, _Mapping]] = ...) -> None: ...

class DeclaredInput(_message.Message):
    __slots__ = ("spec_key", "type", "optional", "uri")
    SPEC_KEY_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    OPTIONAL_FIELD_NUMBER: _ClassVar[int]
    URI_FIELD_NUMBER: _ClassVar[int]
    spec_key: str
    type: str
    optional: bool
    uri: str
    def __init__(self, spec_key: _Optional[str] = ..., type: _Optional[str] = ..., optional: _Optional[bool] = ..., uri: _Optional[str] = ...) -> None: ...

class DeclaredOutput(_message.Message):
    __slots__ = ("spec_key", "type")
    SPEC_KEY_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    spec_key: str
    type: str
    def __init__(self, spec_key: _Optional[str] = ..., type: _Optional[str] = ...) -> None: ...

class ComputeShape(_message.Message):
    __slots__ = ("gpus", "nodes")
    GPUS_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    gpus: int
    nodes: int
    def __init__(self, gpus: _Optional[int] = ..., nodes: _Optional[int] = ...) -> None: ...

class Execution(_message.Message):
    __slots__ = ("environment", "pre_commands", "post_commands", "post_scope", "distributed", "supporting_files", "completion")
    class EnvironmentEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    PRE_COMMANDS_FIELD_NUMBER: _ClassVar[int]
    POST_COMMANDS_FIELD_NUMBER: _ClassVar[int]
    POST_SCOPE_FIELD_NUMBER: _ClassVar[int]
    DISTRIBUTED_FIELD_NUMBER: _ClassVar[int]
    SUPPORTING_FILES_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_FIELD_NUMBER: _ClassVar[int]
    environment: _containers.ScalarMap[str, str]
    pre_commands: _containers.RepeatedScalarFieldContainer[str]
    post_commands: _containers.RepeatedScalarFieldContainer[str]
    post_scope: str
    distributed: Distributed
    supporting_files: _containers.RepeatedCompositeFieldContainer[SupportingFile]
    completion: Completion
    def __init__(self, environment: _Optional[_Mapping[str, str]] = ..., pre_commands: _Optional[_Iterable[str]] = ..., post_commands: _Optional[_Iterable[str]] = ..., post_scope: _Optional[str] = ..., distributed: _Optional[_Union[Distributed, _Mapping]] = ..., supporting_files: _Optional[_Iterable[_Union[SupportingFile, _Mapping]]] = ..., completion: _Optional[_Union[Completion, _Mapping]] = ...) -> None: ...

class Distributed(_message.Message):
    __slots__ = ("launcher", "processes_per_node", "tasks_per_node")
    LAUNCHER_FIELD_NUMBER: _ClassVar[int]
    PROCESSES_PER_NODE_FIELD_NUMBER: _ClassVar[int]
    TASKS_PER_NODE_FIELD_NUMBER: _ClassVar[int]
    launcher: str
    processes_per_node: int
    tasks_per_node: int
    def __init__(self, launcher: _Optional[str] = ..., processes_per_node: _Optional[int] = ..., tasks_per_node: _Optional[int] = ...) -> None: ...

class SupportingFile(_message.Message):
    __slots__ = ("source", "destination", "sha256")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    DESTINATION_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    source: str
    destination: str
    sha256: str
    def __init__(self, source: _Optional[str] = ..., destination: _Optional[str] = ..., sha256: _Optional[str] = ...) -> None: ...

class Completion(_message.Message):
    __slots__ = ("child_exit_code_path", "structured_status_path", "success_states")
    CHILD_EXIT_CODE_PATH_FIELD_NUMBER: _ClassVar[int]
    STRUCTURED_STATUS_PATH_FIELD_NUMBER: _ClassVar[int]
    SUCCESS_STATES_FIELD_NUMBER: _ClassVar[int]
    child_exit_code_path: str
    structured_status_path: str
    success_states: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, child_exit_code_path: _Optional[str] = ..., structured_status_path: _Optional[str] = ..., success_states: _Optional[_Iterable[str]] = ...) -> None: ...
