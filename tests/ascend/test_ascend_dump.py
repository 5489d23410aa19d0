"""Ascend dump files: names, header checks, every dtype and layout read back bit-exact."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fusion_dd.ascend.dump import (
    DumpFileError,
    DumpName,
    TensorToWrite,
    load_tensor,
    parse_file_name,
    read_dump_header,
    read_mapping,
    write_dump_file,
)
from fusion_dd.ascend.layout import LayoutError
from fusion_dd.compare.sources import scan
from tests.ascend.dump_writer import BF16, FRACTAL_NZ, FRACTAL_Z, NC1HWC0, NDC1HWC0, device, op_file, write


def _roundtrip(tmp_path: Path, tensor: dict) -> np.ndarray:
    path = write(tmp_path / "Op.op.1.0.1", "op", [tensor])
    header = read_dump_header(path)
    return np.asarray(load_tensor(path, header.outputs[0]))


@pytest.mark.parametrize(
    "array",
    [
        np.arange(24, dtype=np.float32).reshape(2, 3, 4) - 7.5,
        (np.arange(15, dtype=np.float16) / 7).reshape(3, 5),
        np.array([-128, -1, 0, 5, 127], dtype=np.int8),
        np.array([[True, False], [False, True]]),
        np.float32(3.25),  # a 0-d tensor
        np.zeros((0, 4), np.float32),
    ],
    ids=["float32", "float16", "int8", "bool", "scalar", "empty"],
)
def test_dtypes_read_back_bit_exact(tmp_path: Path, array: np.ndarray) -> None:
    back = _roundtrip(tmp_path, {"data": np.asarray(array)})
    assert back.dtype == np.asarray(array).dtype
    assert back.shape == np.asarray(array).shape
    assert back.tobytes() == np.asarray(array).tobytes()


def test_bf16_is_widened_to_float32_exactly(tmp_path: Path) -> None:
    values = np.array([1.0, -2.5, 0.15625, 2.0**100, -0.0], dtype=np.float32)  # all bf16-representable
    back = _roundtrip(tmp_path, {"data": values, "dtype": BF16})
    assert back.dtype == np.float32
    assert back.tobytes() == values.tobytes()


@pytest.mark.parametrize(
    "fmt, shape, c0",
    [
        (NC1HWC0, (2, 20, 3, 5), 16),
        (NC1HWC0, (1, 40, 2, 2), 32),  # int8-style C0: never assumed to be 16
        (FRACTAL_Z, (18, 20, 3, 3), 16),
        (FRACTAL_Z, (5, 7, 1, 2), 8),
        (FRACTAL_NZ, (20, 37), 16),
        (FRACTAL_NZ, (3, 17, 5), 8),
        (NDC1HWC0, (2, 20, 2, 3, 4), 16),
    ],
)
def test_device_formats_come_back_in_framework_layout_with_padding_cropped(
    tmp_path: Path, fmt: int, shape: tuple[int, ...], c0: int
) -> None:
    original = np.random.default_rng(1).normal(size=shape).astype(np.float16)
    stored = device(original, fmt, c0=c0)
    assert stored.size > original.size  # padding really is there
    back = _roundtrip(tmp_path, {"data": stored, "format": fmt, "original_shape": shape})
    assert back.shape == shape
    assert np.array_equal(back, original)


def test_fusion_dd_writer_and_reader_agree_on_device_formats(tmp_path: Path) -> None:
    from fusion_dd.ascend.layout import to_device

    original = np.random.default_rng(2).normal(size=(3, 20, 37)).astype(np.float32)
    path = tmp_path / "MatMul.mm.1.0.1"
    write_dump_file(path, "mm", [TensorToWrite(to_device(original, FRACTAL_NZ), FRACTAL_NZ, original.shape)])
    assert np.array_equal(load_tensor(path, read_dump_header(path).outputs[0]), original)
    assert np.array_equal(device(original, FRACTAL_NZ), to_device(original, FRACTAL_NZ))


@pytest.mark.parametrize(
    "name, expected",
    [
        ("Conv2D.conv1_Conv2D.12.3.1700000000123", DumpName("Conv2D", "conv1_Conv2D", 12, 3, 1700000000123)),
        ("Add.add_1.7.1700000000001", DumpName("Add", "add_1", 7, None, 1700000000001)),
        ("Add.add_1.4.7.0.1700000000001", DumpName("Add", "add_1", 7, 0, 1700000000001, dump_number=4)),
        ("mapping.csv", None),
        ("ge_proto_00000001_graph_1_Build.txt", None),
        ("Add.add.x.0.1", None),
    ],
)
def test_the_three_file_name_variants(name: str, expected: DumpName | None) -> None:
    assert parse_file_name(name) == expected


def test_hashed_names_are_resolved_through_mapping_csv(tmp_path: Path) -> None:
    folder = tmp_path / "20260101000000" / "0" / "net" / "1" / "0"
    long_name = "scope_" * 60 + "matmul"
    original = f"MatMul.{long_name}.5.0.1700000000005"
    write(folder / "1700000000005", long_name.replace("_", "/"), [{"data": np.ones(3, np.float32)}])
    (folder / "mapping.csv").write_text(f"1700000000005,{original}\n", encoding="utf-8")
    assert read_mapping(folder) == {"1700000000005": original}
    group = next(iter(scan(tmp_path).groups.values()))
    assert [t.op_type for t in group.tensors] == ["MatMul"]
    assert group.tensors[0].op == long_name.replace("_", "/")  # the header's real name wins


@pytest.mark.parametrize("variant", ["stream", "nostream", "dumpnum"])
def test_scanning_finds_files_of_every_variant(tmp_path: Path, variant: str) -> None:
    folder = tmp_path / "t" / "0" / "net" / "3" / "0"
    write(op_file(folder, "Relu", "relu/1", 1, 10, variant), "relu/1", [{"data": np.ones(2, np.float32)}])
    scanned = scan(tmp_path)
    assert list(scanned.groups) == [("net", "3", 0)]
    assert [t.op for t in scanned.groups[("net", "3", 0)].tensors] == ["relu/1"]


def test_truncated_file_is_refused_with_the_reason(tmp_path: Path) -> None:
    path = write(tmp_path / "A.a.1.0.1", "a", [{"data": np.ones(8, np.float32)}], truncate=5)
    with pytest.raises(DumpFileError, match="size mismatch.*truncated"):
        read_dump_header(path)


def test_trailing_bytes_are_a_size_mismatch(tmp_path: Path) -> None:
    path = write(tmp_path / "A.a.1.0.1", "a", [{"data": np.ones(8, np.float32)}], extra=b"x")
    with pytest.raises(DumpFileError, match="trailing"):
        read_dump_header(path)


@pytest.mark.parametrize("content", [b"", b"\x01\x02", b"\xff" * 8 + b"abc", b"\x04\0\0\0\0\0\0\0\xff\xff\xff\xff"])
def test_garbage_headers_are_refused(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "A.a.1.0.1"
    path.write_bytes(content)
    with pytest.raises(DumpFileError):
        read_dump_header(path)


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    import os

    path = tmp_path / "A.a.1.0.1"
    os.mkfifo(path)
    with pytest.raises(DumpFileError, match="not a regular file"):
        read_dump_header(path)


def test_unknown_dtype_and_format_are_per_tensor_errors(tmp_path: Path) -> None:
    path = write(
        tmp_path / "A.a.1.0.1",
        "a",
        [{"data": np.ones(4, np.float32), "dtype": 99}, {"data": np.ones(4, np.float32), "format": 77}],
    )
    header = read_dump_header(path)
    with pytest.raises(LayoutError, match="unsupported data type 99"):
        load_tensor(path, header.outputs[0])
    with pytest.raises(LayoutError, match="unsupported format 77"):
        load_tensor(path, header.outputs[1])


def test_shape_that_does_not_match_the_size_is_an_error(tmp_path: Path) -> None:
    path = write(tmp_path / "A.a.1.0.1", "a", [{"data": np.ones(4, np.float32), "size": 16}])
    header = read_dump_header(path)
    assert header.outputs[0].size == 16
    path2 = write(tmp_path / "B.b.1.0.1", "b", [{"data": np.ones((2, 2), np.float16)}])
    info = read_dump_header(path2).outputs[0]
    from dataclasses import replace

    with pytest.raises(LayoutError, match="shape holds"):
        load_tensor(path2, replace(info, shape=(3, 2)))


def test_inputs_outputs_and_buffers_are_located_in_order(tmp_path: Path) -> None:
    a, b = np.arange(3, dtype=np.float32), np.arange(5, dtype=np.int32)
    out = np.arange(4, dtype=np.float16)
    path = write(tmp_path / "A.a.1.0.1", "a", [{"data": out, "origin": ("orig", 2)}], inputs=[{"data": a}, {"data": b}])
    header = read_dump_header(path)
    assert [t.kind for t in header.inputs + header.outputs] == ["input", "input", "output"]
    assert header.outputs[0].origin == ("orig", 2)
    assert np.array_equal(load_tensor(path, header.inputs[1]), b)
    assert np.array_equal(load_tensor(path, header.outputs[0]), out)
