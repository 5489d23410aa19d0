"""Ascend dump files: names, header checks, every dtype and layout read back bit-exact."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fusion_dd.backends.cann.artifacts.dump import (
    DumpFileError,
    DumpName,
    TensorToWrite,
    load_tensor,
    parse_file_name,
    read_dump_header,
    read_mapping,
    write_dump_file,
)
from fusion_dd.backends.cann.artifacts.layout import LayoutError
from fusion_dd.compare.sources import scan
from tests.backends.cann.artifacts.dump_writer import (
    BF16,
    DHWCN,
    FLOAT8_E4M3FN,
    FLOAT8_E5M2,
    FRACTAL_NZ,
    FRACTAL_Z,
    HIFLOAT8,
    NC,
    NC1HWC0,
    NDC1HWC0,
    NDHWC,
    RESERVED,
    UINT1,
    device,
    op_file,
    write,
    write_nano,
)


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
    from fusion_dd.backends.cann.artifacts.layout import to_device

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


def test_trailing_bytes_are_tolerated_with_a_note(tmp_path: Path) -> None:
    values = np.arange(8, dtype=np.float32)
    path = write(tmp_path / "A.a.1.0.1", "a", [{"data": values}], extra=b"xyz")
    header = read_dump_header(path)
    assert header.notes == ("3 trailing bytes after the declared tensors (ignored)",)
    assert np.array_equal(load_tensor(path, header.outputs[0]), values)


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


# --- msaccucmp's coverage: names, dtypes, formats, nano dumps ------------------------


@pytest.mark.parametrize(
    "name, expected",
    [
        ("Conv2D.conv1_lxslice0.2.9.1670205069987341.4.330.0.0", ("conv1_lxslice0", 9, 2, 1670205069987341, 4, 330, 0, 0)),
        ("Conv2D.conv1.9.1670205069987341.4.330.1.0", ("conv1", 9, None, 1670205069987341, 4, 330, 1, 0)),
        ("Add.add_1.3.1.1670205069987341", ("add_1", 3, 1, 1670205069987341, None, None, None, None)),
        ("Add.add_1.3.1670205069987341", ("add_1", 3, None, 1670205069987341, None, None, None, None)),
    ],
)
def test_file_name_grammar_of_4_to_9_fields(name: str, expected: tuple) -> None:
    parsed = parse_file_name(name)
    assert parsed is not None
    got = (parsed.op_name, parsed.task_id, parsed.stream_id, parsed.timestamp, parsed.task_type,
           parsed.context_id, parsed.thread_id, parsed.device_id)  # fmt: skip
    assert got == expected


def test_the_newer_ffts_plus_name_with_its_literal_mark_is_a_dump_file() -> None:
    # The runtime's dump manager: type.name.dump_number.task.stream.ts, then .FFTSPLUS.context.thread.device
    # for a context and thread of an FFTS+ task; the op name keeps its dots on this path.
    parsed = parse_file_name("Sub.sub_1.0.7.1.1700000000000001.FFTSPLUS.330.1.0")
    assert parsed == DumpName("Sub", "sub_1", 7, 1, 1700000000000001, 0, None, 330, 1, 0)
    assert parsed.ffts
    dotted = parse_file_name("MatMul.layer.0.mm.2.7.1.1700000000000001.FFTSPLUS.330.2.0")
    assert dotted is not None and dotted.op_name == "layer.0.mm" and dotted.thread_id == 2 and dotted.dump_number == 2
    assert parse_file_name("Sub.sub_1.0.7.1.1700000000000001.FFTSPLUS.x.1.0") is None


def test_lxslice_names_their_op_and_slice() -> None:
    parsed = parse_file_name("Conv2D.sgt_graph_0_conv2d_39_Conv2D_lxslice1.2.9.1670205069987340.4.487.0.0")
    assert parsed is not None and parsed.slice_index == 1 and parsed.base_name == "sgt_graph_0_conv2d_39_Conv2D"


@pytest.mark.parametrize("name", ["Conv2D.conv1.a.1.1", "only.two", "A.b.1.2.3.4.5.6.7.8", "ge_proto_00001_Build.txt"])
def test_other_names_are_not_dump_files(name: str) -> None:
    assert parse_file_name(name) is None


def test_complex_values_come_back_as_real_imaginary_pairs(tmp_path: Path) -> None:
    values = np.array([[1 + 2j, -3.5 - 0.25j], [0j, 4 - 1j]], dtype=np.complex64)
    back = _roundtrip(tmp_path, {"data": values})
    assert back.shape == (2, 2, 2)
    assert np.array_equal(back[..., 0], values.real) and np.array_equal(back[..., 1], values.imag)
    back128 = _roundtrip(tmp_path, {"data": values.astype(np.complex128)})
    assert back128.dtype == np.float64 and np.array_equal(back128[..., 1], values.imag.astype(np.float64))


def test_uint1_is_unpacked_high_bit_first(tmp_path: Path) -> None:
    bits = np.array([1, 0, 1, 1, 0, 0, 0, 1, 1, 1, 0], dtype=np.uint8)
    back = _roundtrip(tmp_path, {"data": bits, "dtype": UINT1})
    assert back.tolist() == bits.tolist()


# Reference values straight from the formats' definitions (OCP FP8; Ascend HiFloat8), bit pattern -> value.
E4M3FN_CASES = {0x00: 0.0, 0x80: -0.0, 0x01: 2.0**-9, 0x08: 2.0**-6, 0x38: 1.0, 0x3C: 1.5, 0x7E: 448.0, 0xFE: -448.0}
E5M2_CASES = {0x01: 2.0**-16, 0x04: 2.0**-14, 0x3C: 1.0, 0x3E: 1.5, 0x7B: 57344.0, 0x7C: np.inf, 0xFC: -np.inf}
HIFLOAT8_CASES = {
    0x00: 0.0, 0x01: 2.0**-22, 0x07: 2.0**-16,  # denormals 2**(m-23)
    0x08: 1.0, 0x0C: 1.5, 0x8C: -1.5,  # D=0: 0001 + 3 mantissa bits
    0x10: 2.0, 0x18: 0.5, 0x14: 3.0,  # D=1: 001, exponent sign-magnitude +-1, 3 mantissa bits
    0x20: 4.0, 0x28: 8.0, 0x30: 0.25,  # D=2: 01, exponent +-(2 + m)
    0x40: 16.0, 0x50: 2.0**-4,  # D=3: 10, exponent +-(4 + m)
    0x60: 2.0**8, 0x6E: 2.0**15, 0x7E: 2.0**-15,  # D=4: 11, exponent +-(8 + m), 1 mantissa bit
    0x6F: np.inf, 0xEF: -np.inf,
}


@pytest.mark.parametrize("code, cases", [(FLOAT8_E4M3FN, E4M3FN_CASES), (FLOAT8_E5M2, E5M2_CASES), (HIFLOAT8, HIFLOAT8_CASES)],
                         ids=["float8_e4m3fn", "float8_e5m2", "hifloat8"])  # fmt: skip
def test_eight_bit_floats_decode_exactly(tmp_path: Path, code: int, cases: dict[int, float]) -> None:
    raw = np.array(list(cases), dtype=np.uint8)
    back = _roundtrip(tmp_path, {"data": raw, "dtype": code, "raw": raw.tobytes()})
    assert back.dtype == np.float32
    assert back.tolist() == [np.float32(value) for value in cases.values()]
    assert np.signbit(back).tolist() == [bool(bits & 0x80) for bits in cases]


def test_eight_bit_float_nans(tmp_path: Path) -> None:
    for code, nan in ((FLOAT8_E4M3FN, 0x7F), (FLOAT8_E5M2, 0x7D), (HIFLOAT8, 0x80)):
        raw = np.array([nan], dtype=np.uint8)
        assert np.isnan(_roundtrip(tmp_path, {"data": raw, "dtype": code, "raw": raw.tobytes()})[0])


@pytest.mark.parametrize("fmt", [NDHWC, DHWCN, NC, RESERVED])
def test_plain_formats_pass_through(tmp_path: Path, fmt: int) -> None:
    values = np.arange(24, dtype=np.float16).reshape(2, 3, 4)
    back = _roundtrip(tmp_path, {"data": values, "format": fmt, "original_shape": values.shape})
    assert np.array_equal(back, values)


@pytest.mark.parametrize("shape", [(37,), (2, 3, 20, 17)], ids=["1-D", "batched"])
def test_fractal_nz_of_1d_and_batched_shapes(tmp_path: Path, shape: tuple[int, ...]) -> None:
    original = np.random.default_rng(2).normal(size=shape).astype(np.float16)
    stored = device(original, FRACTAL_NZ)
    back = _roundtrip(tmp_path, {"data": stored, "format": FRACTAL_NZ, "original_shape": shape})
    assert back.shape == shape and np.array_equal(back, original)


def test_group_conv_sub_format_is_refused_without_a_converter_and_read_with_one(tmp_path: Path, monkeypatch) -> None:
    weights = np.arange(2 * 16 * 1 * 1, dtype=np.float16).reshape(2, 16, 1, 1)
    stored = device(weights, FRACTAL_Z)
    path = write(tmp_path / "Conv2D.w.1.0.1", "w", [{"data": stored, "format": FRACTAL_Z, "original_shape": weights.shape, "sub_format": 2}])
    info = read_dump_header(path).outputs[0]
    assert info.sub_format == 2
    with pytest.raises(LayoutError, match="sub_format 2"):
        load_tensor(path, info)
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "convert_FRACTAL_Z_G2_to_NCHW.py").write_text(
        "import numpy as np\n"
        "def convert(data, original_shape, sub_format):\n"
        "    return np.full(original_shape, float(sub_format), np.float32)\n",
        encoding="utf-8",
    )
    monkeypatch.setenv("FUSION_DD_CONVERTERS", str(plugins))
    assert np.array_equal(load_tensor(path, info), np.full((2, 16, 1, 1), 2.0, np.float32))


def test_a_converter_reads_a_format_fusion_dd_does_not(tmp_path: Path, monkeypatch) -> None:
    fractal_z_3d = 33
    values = np.arange(6, dtype=np.float32)
    path = write(tmp_path / "Conv3D.w.1.0.1", "w", [{"data": values, "format": fractal_z_3d}])
    info = read_dump_header(path).outputs[0]
    with pytest.raises(LayoutError, match="convert_FRACTAL_Z_3D_to_ND.py"):
        load_tensor(path, info)
    (tmp_path / "convert_FRACTAL_Z_3D_to_NCDHW.py").write_text(
        "def convert(data, original_shape, sub_format):\n    return data[::-1]\n", encoding="utf-8"
    )
    monkeypatch.setenv("FUSION_DD_CONVERTERS", str(tmp_path))
    assert load_tensor(path, info).tolist() == values[::-1].tolist()


def test_nano_dump_is_read_with_its_own_dtype_enum(tmp_path: Path) -> None:
    x = np.arange(6, dtype=np.float16).reshape(2, 3)
    y = (np.arange(4, dtype=np.int32) - 2).reshape(4)
    path = write_nano(tmp_path / "Add.add1.3.0.1670205069987341", [{"data": y}], [{"data": x}], origin_names=["add1"])
    header = read_dump_header(path)
    assert header.nano
    assert [(t.kind, t.data_type, t.shape) for t in (*header.inputs, *header.outputs)] == [
        ("input", 2, (2, 3)), ("output", 7, (4,)),
    ]  # fmt: skip
    assert header.outputs[0].origin == ("add1", 0)
    assert np.array_equal(load_tensor(path, header.inputs[0]), x)
    assert np.array_equal(load_tensor(path, header.outputs[0]), y)


def test_truncated_nano_dump_is_refused(tmp_path: Path) -> None:
    path = write_nano(tmp_path / "Add.add1.3.0.1670205069987341", [{"data": np.ones(8, np.float32)}])
    path.write_bytes(path.read_bytes()[:-4])
    with pytest.raises(DumpFileError, match="truncated"):
        read_dump_header(path)
