"""The ``toolkit.dumpdata.DumpData`` message of Ascend tensor dumps, built in Python.

Every file of an Ascend tensor dump starts with a ``DumpData`` protobuf header that
describes the op's inputs, outputs, buffers and workspaces (their ``data`` fields
left empty; the raw bytes follow the header). As for the GE graph schema
(``ge_schema.py``), the descriptors are assembled from a table at run time so that
no ``protoc`` and no generated ``_pb2`` module is needed, in a private pool so that
a process that also imports CANN's own ``dump_data_pb2`` sees no conflict.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool

from .schemas import generated_class, private_pool

PACKAGE = "toolkit.dumpdata"
FILE_NAME = "fusion_dd/dump_data.proto"

_F = descriptor_pb2.FieldDescriptorProto
_SCALARS = {
    "string": _F.TYPE_STRING,
    "bytes": _F.TYPE_BYTES,
    "int32": _F.TYPE_INT32,
    "uint32": _F.TYPE_UINT32,
    "uint64": _F.TYPE_UINT64,
}

# (message, field, number, type, repeated); a non-scalar type names a message here.
FIELDS: tuple[tuple[str, str, int, str, bool], ...] = (
    ("Shape", "dim", 1, "uint64", True),
    ("OriginalOp", "name", 1, "string", False),
    ("OriginalOp", "output_index", 2, "uint32", False),
    ("OriginalOp", "data_type", 3, "int32", False),
    ("OriginalOp", "format", 4, "int32", False),
    ("OpOutput", "data_type", 1, "int32", False),
    ("OpOutput", "format", 2, "int32", False),
    ("OpOutput", "shape", 3, "Shape", False),
    ("OpOutput", "original_op", 4, "OriginalOp", False),
    ("OpOutput", "data", 5, "bytes", False),
    ("OpOutput", "size", 6, "uint64", False),
    ("OpOutput", "original_shape", 7, "Shape", False),
    ("OpOutput", "sub_format", 8, "int32", False),
    ("OpOutput", "address", 9, "uint64", False),
    ("OpInput", "data_type", 1, "int32", False),
    ("OpInput", "format", 2, "int32", False),
    ("OpInput", "shape", 3, "Shape", False),
    ("OpInput", "data", 4, "bytes", False),
    ("OpInput", "size", 5, "uint64", False),
    ("OpInput", "original_shape", 6, "Shape", False),
    ("OpInput", "sub_format", 7, "int32", False),
    ("OpInput", "address", 8, "uint64", False),
    ("OpBuffer", "buffer_type", 1, "int32", False),
    ("OpBuffer", "data", 2, "bytes", False),
    ("OpBuffer", "size", 3, "uint64", False),
    ("OpAttr", "name", 1, "string", False),
    ("OpAttr", "value", 2, "string", False),
    ("Workspace", "type", 1, "int32", False),
    ("Workspace", "data", 2, "bytes", False),
    ("Workspace", "size", 3, "uint64", False),
    ("DumpData", "version", 1, "string", False),
    ("DumpData", "dump_time", 2, "uint64", False),
    ("DumpData", "output", 3, "OpOutput", True),
    ("DumpData", "input", 4, "OpInput", True),
    ("DumpData", "buffer", 5, "OpBuffer", True),
    ("DumpData", "op_name", 6, "string", False),
    ("DumpData", "attr", 7, "OpAttr", True),
    ("DumpData", "space", 8, "Workspace", True),
)

_MESSAGES = ("Shape", "OriginalOp", "OpOutput", "OpInput", "OpBuffer", "OpAttr", "Workspace", "DumpData")


def file_descriptor_proto() -> descriptor_pb2.FileDescriptorProto:
    """The schema as a ``FileDescriptorProto`` (what protoc would have produced)."""
    file_proto = descriptor_pb2.FileDescriptorProto(name=FILE_NAME, package=PACKAGE, syntax="proto3")
    messages = {name: file_proto.message_type.add(name=name) for name in _MESSAGES}
    for message_name, field_name, number, type_name, repeated in FIELDS:
        field = messages[message_name].field.add(name=field_name, number=number)
        field.label = _F.LABEL_REPEATED if repeated else _F.LABEL_OPTIONAL
        if type_name in _SCALARS:
            field.type = _SCALARS[type_name]
        else:
            field.type = _F.TYPE_MESSAGE
            field.type_name = f".{PACKAGE}.{type_name}"
    return file_proto


@lru_cache(maxsize=None)
def message_class(name: str) -> Any:
    """The generated class of one message, e.g. ``message_class("DumpData")``."""
    return generated_class(_pool(), f"{PACKAGE}.{name}")


@lru_cache(maxsize=1)
def _pool() -> descriptor_pool.DescriptorPool:
    return private_pool(file_descriptor_proto())
