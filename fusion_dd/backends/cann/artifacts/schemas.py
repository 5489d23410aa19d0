"""Message classes from descriptors assembled in code, in a private pool: what both schema modules need.

``ge_schema.py`` and ``dump_schema.py`` each build a ``FileDescriptorProto`` from
a table (no ``protoc``, no generated ``_pb2`` module); this turns one into its
pool and a message name into its generated class, on every protobuf version
fusion-dd supports.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory


def private_pool(file_proto: descriptor_pb2.FileDescriptorProto) -> descriptor_pool.DescriptorPool:
    """A pool of its own holding ``file_proto``: CANN's own ``_pb2`` modules, if imported too, see no conflict."""
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file_proto)
    return pool


def generated_class(pool: descriptor_pool.DescriptorPool, full_name: str) -> Any:
    """The generated class of the message ``full_name`` (package included) in ``pool``."""
    descriptor = pool.FindMessageTypeByName(full_name)
    get_class = getattr(message_factory, "GetMessageClass", None)
    if get_class is not None:
        return get_class(descriptor)
    # protobuf < 4.22 has no GetMessageClass.
    return message_factory.MessageFactory(pool).GetPrototype(descriptor)
