from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Tensor(_message.Message):
    __slots__ = ("int64_data", "float_data", "int_data", "float64_data", "uint32_data", "bool_data", "complex64_data", "complex128_data", "data", "elem_type", "shape", "lod", "name", "alias_name", "tensor_content")
    INT64_DATA_FIELD_NUMBER: _ClassVar[int]
    FLOAT_DATA_FIELD_NUMBER: _ClassVar[int]
    INT_DATA_FIELD_NUMBER: _ClassVar[int]
    FLOAT64_DATA_FIELD_NUMBER: _ClassVar[int]
    UINT32_DATA_FIELD_NUMBER: _ClassVar[int]
    BOOL_DATA_FIELD_NUMBER: _ClassVar[int]
    COMPLEX64_DATA_FIELD_NUMBER: _ClassVar[int]
    COMPLEX128_DATA_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    ELEM_TYPE_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    LOD_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ALIAS_NAME_FIELD_NUMBER: _ClassVar[int]
    TENSOR_CONTENT_FIELD_NUMBER: _ClassVar[int]
    int64_data: _containers.RepeatedScalarFieldContainer[int]
    float_data: _containers.RepeatedScalarFieldContainer[float]
    int_data: _containers.RepeatedScalarFieldContainer[int]
    float64_data: _containers.RepeatedScalarFieldContainer[float]
    uint32_data: _containers.RepeatedScalarFieldContainer[int]
    bool_data: _containers.RepeatedScalarFieldContainer[bool]
    complex64_data: _containers.RepeatedScalarFieldContainer[float]
    complex128_data: _containers.RepeatedScalarFieldContainer[float]
    data: _containers.RepeatedScalarFieldContainer[str]
    elem_type: int
    shape: _containers.RepeatedScalarFieldContainer[int]
    lod: _containers.RepeatedScalarFieldContainer[int]
    name: str
    alias_name: str
    tensor_content: bytes
    def __init__(self, int64_data: _Optional[_Iterable[int]] = ..., float_data: _Optional[_Iterable[float]] = ..., int_data: _Optional[_Iterable[int]] = ..., float64_data: _Optional[_Iterable[float]] = ..., uint32_data: _Optional[_Iterable[int]] = ..., bool_data: _Optional[_Iterable[bool]] = ..., complex64_data: _Optional[_Iterable[float]] = ..., complex128_data: _Optional[_Iterable[float]] = ..., data: _Optional[_Iterable[str]] = ..., elem_type: _Optional[int] = ..., shape: _Optional[_Iterable[int]] = ..., lod: _Optional[_Iterable[int]] = ..., name: _Optional[str] = ..., alias_name: _Optional[str] = ..., tensor_content: _Optional[bytes] = ...) -> None: ...

class Request(_message.Message):
    __slots__ = ("tensor", "fetch_var_names", "profile_server", "log_id")
    TENSOR_FIELD_NUMBER: _ClassVar[int]
    FETCH_VAR_NAMES_FIELD_NUMBER: _ClassVar[int]
    PROFILE_SERVER_FIELD_NUMBER: _ClassVar[int]
    LOG_ID_FIELD_NUMBER: _ClassVar[int]
    tensor: _containers.RepeatedCompositeFieldContainer[Tensor]
    fetch_var_names: _containers.RepeatedScalarFieldContainer[str]
    profile_server: bool
    log_id: int
    def __init__(self, tensor: _Optional[_Iterable[_Union[Tensor, _Mapping]]] = ..., fetch_var_names: _Optional[_Iterable[str]] = ..., profile_server: bool = ..., log_id: _Optional[int] = ...) -> None: ...

class Response(_message.Message):
    __slots__ = ("outputs", "profile_time", "profile_server", "log_id", "err_no", "err_msg")
    OUTPUTS_FIELD_NUMBER: _ClassVar[int]
    PROFILE_TIME_FIELD_NUMBER: _ClassVar[int]
    PROFILE_SERVER_FIELD_NUMBER: _ClassVar[int]
    LOG_ID_FIELD_NUMBER: _ClassVar[int]
    ERR_NO_FIELD_NUMBER: _ClassVar[int]
    ERR_MSG_FIELD_NUMBER: _ClassVar[int]
    outputs: _containers.RepeatedCompositeFieldContainer[ModelOutput]
    profile_time: _containers.RepeatedScalarFieldContainer[int]
    profile_server: bool
    log_id: int
    err_no: int
    err_msg: str
    def __init__(self, outputs: _Optional[_Iterable[_Union[ModelOutput, _Mapping]]] = ..., profile_time: _Optional[_Iterable[int]] = ..., profile_server: bool = ..., log_id: _Optional[int] = ..., err_no: _Optional[int] = ..., err_msg: _Optional[str] = ...) -> None: ...

class ModelOutput(_message.Message):
    __slots__ = ("tensor", "engine_name")
    TENSOR_FIELD_NUMBER: _ClassVar[int]
    ENGINE_NAME_FIELD_NUMBER: _ClassVar[int]
    tensor: _containers.RepeatedCompositeFieldContainer[Tensor]
    engine_name: str
    def __init__(self, tensor: _Optional[_Iterable[_Union[Tensor, _Mapping]]] = ..., engine_name: _Optional[str] = ...) -> None: ...
