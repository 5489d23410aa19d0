"""Message classes from descriptors assembled in code (fusion_dd/backends/cann/artifacts/schemas.py)."""

from __future__ import annotations

from google.protobuf import descriptor_pb2

from fusion_dd.backends.cann.artifacts.schemas import generated_class, private_pool


def _file(package: str) -> descriptor_pb2.FileDescriptorProto:
    file_proto = descriptor_pb2.FileDescriptorProto(name=f"{package}.proto", package=package, syntax="proto3")
    message = file_proto.message_type.add(name="Point")
    message.field.add(name="x", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_INT64,
                      label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    return file_proto


def test_a_generated_class_reads_what_it_wrote() -> None:
    point = generated_class(private_pool(_file("schemas_test")), "schemas_test.Point")
    data = point(x=7).SerializeToString()
    assert point.FromString(data).x == 7


def test_two_pools_may_hold_the_same_file_without_conflict() -> None:
    first = generated_class(private_pool(_file("schemas_twice")), "schemas_twice.Point")
    second = generated_class(private_pool(_file("schemas_twice")), "schemas_twice.Point")
    assert first(x=1).x == second(x=1).x == 1
