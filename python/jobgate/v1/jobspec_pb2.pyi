from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class JobSpec(_message.Message):
    __slots__ = ("api_version", "kind", "metadata", "spec", "provenance")
    API_VERSION_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    PROVENANCE_FIELD_NUMBER: _ClassVar[int]
    api_version: str
    kind: str
    metadata: JobMetadata
    spec: JobSpecBody
    provenance: Provenance
    def __init__(self, api_version: _Optional[str] = ..., kind: _Optional[str] = ..., metadata: _Optional[_Union[JobMetadata, _Mapping]] = ..., spec: _Optional[_Union[JobSpecBody, _Mapping]] = ..., provenance: _Optional[_Union[Provenance, _Mapping]] = ...) -> None: ...

class JobMetadata(_message.Message):
    __slots__ = ("name", "project", "owner", "display_name", "labels")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    PROJECT_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    DISPLAY_NAME_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    name: str
    project: str
    owner: str
    display_name: str
    labels: _containers.ScalarMap[str, str]
    def __init__(self, name: _Optional[str] = ..., project: _Optional[str] = ..., owner: _Optional[str] = ..., display_name: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ...) -> None: ...

class JobSpecBody(_message.Message):
    __slots__ = ("recipe", "source", "framework", "resources", "model", "data", "hyperparams", "lifecycle", "plugins", "evaluation")
    RECIPE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    FRAMEWORK_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    HYPERPARAMS_FIELD_NUMBER: _ClassVar[int]
    LIFECYCLE_FIELD_NUMBER: _ClassVar[int]
    PLUGINS_FIELD_NUMBER: _ClassVar[int]
    EVALUATION_FIELD_NUMBER: _ClassVar[int]
    recipe: RecipeRef
    source: SourceRef
    framework: FrameworkRef
    resources: Resources
    model: ModelRef
    data: DataRefs
    hyperparams: _struct_pb2.Struct
    lifecycle: Lifecycle
    plugins: _containers.RepeatedCompositeFieldContainer[PluginRef]
    evaluation: _struct_pb2.Struct
    def __init__(self, recipe: _Optional[_Union[RecipeRef, _Mapping]] = ..., source: _Optional[_Union[SourceRef, _Mapping]] = ..., framework: _Optional[_Union[FrameworkRef, _Mapping]] = ..., resources: _Optional[_Union[Resources, _Mapping]] = ..., model: _Optional[_Union[ModelRef, _Mapping]] = ..., data: _Optional[_Union[DataRefs, _Mapping]] = ..., hyperparams: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., lifecycle: _Optional[_Union[Lifecycle, _Mapping]] = ..., plugins: _Optional[_Iterable[_Union[PluginRef, _Mapping]]] = ..., evaluation: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class RecipeRef(_message.Message):
    __slots__ = ("name", "version", "digest", "plugins")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    PLUGINS_FIELD_NUMBER: _ClassVar[int]
    name: str
    version: str
    digest: str
    plugins: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., version: _Optional[str] = ..., digest: _Optional[str] = ..., plugins: _Optional[_Iterable[str]] = ...) -> None: ...

class SourceRef(_message.Message):
    __slots__ = ("exp", "entrypoint")
    EXP_FIELD_NUMBER: _ClassVar[int]
    ENTRYPOINT_FIELD_NUMBER: _ClassVar[int]
    exp: str
    entrypoint: str
    def __init__(self, exp: _Optional[str] = ..., entrypoint: _Optional[str] = ...) -> None: ...

class FrameworkRef(_message.Message):
    __slots__ = ("kind", "version", "runtime_id", "image", "observability_url")
    KIND_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_ID_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    OBSERVABILITY_URL_FIELD_NUMBER: _ClassVar[int]
    kind: str
    version: str
    runtime_id: str
    image: str
    observability_url: str
    def __init__(self, kind: _Optional[str] = ..., version: _Optional[str] = ..., runtime_id: _Optional[str] = ..., image: _Optional[str] = ..., observability_url: _Optional[str] = ...) -> None: ...

class Resources(_message.Message):
    __slots__ = ("pools", "roles")
    class RolesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    POOLS_FIELD_NUMBER: _ClassVar[int]
    ROLES_FIELD_NUMBER: _ClassVar[int]
    pools: _containers.RepeatedCompositeFieldContainer[Pool]
    roles: _containers.ScalarMap[str, str]
    def __init__(self, pools: _Optional[_Iterable[_Union[Pool, _Mapping]]] = ..., roles: _Optional[_Mapping[str, str]] = ...) -> None: ...

class Pool(_message.Message):
    __slots__ = ("name", "series", "nodes", "gpus_per_node")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SERIES_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    GPUS_PER_NODE_FIELD_NUMBER: _ClassVar[int]
    name: str
    series: str
    nodes: int
    gpus_per_node: int
    def __init__(self, name: _Optional[str] = ..., series: _Optional[str] = ..., nodes: _Optional[int] = ..., gpus_per_node: _Optional[int] = ...) -> None: ...

class ModelRef(_message.Message):
    __slots__ = ("base", "init_from", "peft")
    BASE_FIELD_NUMBER: _ClassVar[int]
    INIT_FROM_FIELD_NUMBER: _ClassVar[int]
    PEFT_FIELD_NUMBER: _ClassVar[int]
    base: str
    init_from: str
    peft: _struct_pb2.Struct
    def __init__(self, base: _Optional[str] = ..., init_from: _Optional[str] = ..., peft: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class DataRefs(_message.Message):
    __slots__ = ("train", "validation", "corpus", "volumes", "output_dataset", "environment", "quality")
    TRAIN_FIELD_NUMBER: _ClassVar[int]
    VALIDATION_FIELD_NUMBER: _ClassVar[int]
    CORPUS_FIELD_NUMBER: _ClassVar[int]
    VOLUMES_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_DATASET_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    QUALITY_FIELD_NUMBER: _ClassVar[int]
    train: DataRef
    validation: DataRef
    corpus: str
    volumes: _containers.RepeatedScalarFieldContainer[str]
    output_dataset: str
    environment: str
    quality: _struct_pb2.Struct
    def __init__(self, train: _Optional[_Union[DataRef, _Mapping]] = ..., validation: _Optional[_Union[DataRef, _Mapping]] = ..., corpus: _Optional[str] = ..., volumes: _Optional[_Iterable[str]] = ..., output_dataset: _Optional[str] = ..., environment: _Optional[str] = ..., quality: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class DataRef(_message.Message):
    __slots__ = ("dataset", "split", "path")
    DATASET_FIELD_NUMBER: _ClassVar[int]
    SPLIT_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    dataset: str
    split: str
    path: str
    def __init__(self, dataset: _Optional[str] = ..., split: _Optional[str] = ..., path: _Optional[str] = ...) -> None: ...

class Lifecycle(_message.Message):
    __slots__ = ("on_success",)
    ON_SUCCESS_FIELD_NUMBER: _ClassVar[int]
    on_success: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, on_success: _Optional[_Iterable[str]] = ...) -> None: ...

class PluginRef(_message.Message):
    __slots__ = ("id", "version", "digest")
    ID_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    id: str
    version: str
    digest: str
    def __init__(self, id: _Optional[str] = ..., version: _Optional[str] = ..., digest: _Optional[str] = ...) -> None: ...

class Provenance(_message.Message):
    __slots__ = ("git_commit", "git_dirty", "config_sha", "core_version", "model_name")
    GIT_COMMIT_FIELD_NUMBER: _ClassVar[int]
    GIT_DIRTY_FIELD_NUMBER: _ClassVar[int]
    CONFIG_SHA_FIELD_NUMBER: _ClassVar[int]
    CORE_VERSION_FIELD_NUMBER: _ClassVar[int]
    MODEL_NAME_FIELD_NUMBER: _ClassVar[int]
    git_commit: str
    git_dirty: bool
    config_sha: str
    core_version: str
    model_name: str
    def __init__(self, git_commit: _Optional[str] = ..., git_dirty: _Optional[bool] = ..., config_sha: _Optional[str] = ..., core_version: _Optional[str] = ..., model_name: _Optional[str] = ...) -> None: ...
