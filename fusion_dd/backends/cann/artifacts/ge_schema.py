"""The ``ge.proto`` messages of GE graph dumps, built in Python.

GE writes graph dumps as a ``ge.proto.ModelDef`` in protobuf text format. Parsing
them needs message classes with CANN's field numbers, but users install fusion-dd
from a wheel on machines without ``protoc``; so the descriptors are assembled here
from a small table (mirrored for reading in ``fusion_dd/data/ge_ir.proto``) and
turned into classes by the ``protobuf`` runtime, which works from protobuf 4.x to
7.x. The pool is private so that a process that also loads CANN's own
``ge_ir_pb2`` (msprobe, precision_tool) sees no duplicate-symbol conflict.

Only the fields fusion-dd reads are declared; everything else in a dump is an
unknown field, which the text parser skips (docs/architecture.md 2.4).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool

from .schemas import generated_class, private_pool

PACKAGE = "ge.proto"
FILE_NAME = "fusion_dd/ge_ir.proto"

_F = descriptor_pb2.FieldDescriptorProto
_SCALARS = {
    "string": _F.TYPE_STRING,
    "bytes": _F.TYPE_BYTES,
    "int64": _F.TYPE_INT64,
    "uint32": _F.TYPE_UINT32,
    "float": _F.TYPE_FLOAT,
    "bool": _F.TYPE_BOOL,
}

# (message, field, number, type, repeated, oneof). A type that is not a scalar
# names a message of this file; "map" is map<string, AttrDef>.
FIELDS: tuple[tuple[str, str, int, str, bool, str | None], ...] = (
    ("AttrDef.ListValue", "s", 2, "bytes", True, None),
    ("AttrDef.ListValue", "i", 3, "int64", True, None),
    ("AttrDef.ListValue", "f", 4, "float", True, None),
    ("AttrDef.ListValue", "b", 5, "bool", True, None),
    ("AttrDef.ListValue", "bt", 7, "bytes", True, None),
    ("AttrDef", "list", 1, "AttrDef.ListValue", False, "value"),
    ("AttrDef", "s", 2, "bytes", False, "value"),
    ("AttrDef", "i", 3, "int64", False, "value"),
    ("AttrDef", "f", 4, "float", False, "value"),
    ("AttrDef", "b", 5, "bool", False, "value"),
    ("AttrDef", "bt", 7, "bytes", False, "value"),
    ("TensorDescriptor", "name", 1, "string", False, None),
    ("TensorDescriptor", "attr", 5, "map", False, None),
    ("OpDef", "name", 1, "string", False, None),
    ("OpDef", "type", 2, "string", False, None),
    ("OpDef", "input", 5, "string", True, None),
    ("OpDef", "attr", 10, "map", False, None),
    ("OpDef", "has_out_attr", 20, "bool", False, None),
    ("OpDef", "id", 21, "int64", False, None),
    ("OpDef", "stream_id", 22, "int64", False, None),
    ("OpDef", "input_desc", 33, "TensorDescriptor", True, None),
    ("OpDef", "output_desc", 34, "TensorDescriptor", True, None),
    ("OpDef", "subgraph_name", 35, "string", True, None),
    ("GraphDef", "name", 1, "string", False, None),
    ("GraphDef", "input", 4, "string", True, None),
    ("GraphDef", "output", 5, "string", True, None),
    ("GraphDef", "op", 6, "OpDef", True, None),
    ("GraphDef", "attr", 11, "map", False, None),
    ("ModelDef", "name", 1, "string", False, None),
    ("ModelDef", "version", 2, "uint32", False, None),
    ("ModelDef", "custom_version", 3, "string", False, None),
    ("ModelDef", "graph", 7, "GraphDef", True, None),
    ("ModelDef", "attr", 11, "map", False, None),
)

_MESSAGES = ("AttrDef", "TensorDescriptor", "OpDef", "GraphDef", "ModelDef")


def file_descriptor_proto() -> descriptor_pb2.FileDescriptorProto:
    """The schema as a ``FileDescriptorProto`` (what protoc would have produced)."""
    file_proto = descriptor_pb2.FileDescriptorProto(
        name=FILE_NAME, package=PACKAGE, syntax="proto3"
    )
    messages: dict[str, descriptor_pb2.DescriptorProto] = {}
    for name in _MESSAGES:
        messages[name] = file_proto.message_type.add(name=name)
    messages["AttrDef.ListValue"] = messages["AttrDef"].nested_type.add(name="ListValue")
    messages["AttrDef"].oneof_decl.add(name="value")

    for message_name, field_name, number, type_name, repeated, oneof in FIELDS:
        message = messages[message_name]
        field = message.field.add(name=field_name, number=number)
        field.label = _F.LABEL_REPEATED if repeated else _F.LABEL_OPTIONAL
        if oneof is not None:
            field.oneof_index = 0
        if type_name == "map":
            entry_name = _map_entry(message, field_name)
            field.label = _F.LABEL_REPEATED
            field.type = _F.TYPE_MESSAGE
            field.type_name = f".{PACKAGE}.{message_name}.{entry_name}"
        elif type_name in _SCALARS:
            field.type = _SCALARS[type_name]
        else:
            field.type = _F.TYPE_MESSAGE
            field.type_name = f".{PACKAGE}.{type_name}"
    return file_proto


def _map_entry(message: descriptor_pb2.DescriptorProto, field_name: str) -> str:
    """Declare the nested ``XxxEntry`` type protobuf uses for a map field."""
    entry_name = "".join(part.capitalize() for part in field_name.split("_")) + "Entry"
    entry = message.nested_type.add(name=entry_name)
    entry.options.map_entry = True
    entry.field.add(name="key", number=1, type=_F.TYPE_STRING, label=_F.LABEL_OPTIONAL)
    entry.field.add(
        name="value",
        number=2,
        type=_F.TYPE_MESSAGE,
        label=_F.LABEL_OPTIONAL,
        type_name=f".{PACKAGE}.AttrDef",
    )
    return entry_name


@lru_cache(maxsize=None)
def message_class(name: str) -> Any:
    """The generated class of one message, e.g. ``message_class("ModelDef")``."""
    return generated_class(_pool(), f"{PACKAGE}.{name}")


@lru_cache(maxsize=1)
def _pool() -> descriptor_pool.DescriptorPool:
    return private_pool(file_descriptor_proto())
