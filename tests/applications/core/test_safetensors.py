"""The NumPy safetensors reader and writer: the documented layout, BF16, errors, and agreement with the
safetensors package."""

import json
import os
import struct

import numpy as np
import pytest
from attnlayers.applications.core.formats.safetensors import read_safetensors, write_safetensors


def _parse_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (size,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + size])
    return header, data[8 + size:]


def test_safetensors_format(tmp_path):
    path = str(tmp_path / "t.safetensors")
    tensors = {
        "b": np.arange(6, dtype=">f4").reshape(2, 3),  # big-endian in memory: stored little-endian
        "a": np.array([[1, -2]], "int64"), "m": np.array([True, False]), "h": np.array([0.5, -1.25], "float16"),
        "s": np.zeros((0, 4), "float32"),
    }
    write_safetensors(path, tensors, metadata={"format": "pt"})
    header, data = _parse_safetensors(path)
    assert (8 + len(json.dumps(header, separators=(",", ":")).encode())) <= os.path.getsize(path)
    assert header["__metadata__"] == {"format": "pt"}
    assert header["b"]["dtype"] == "F32" and header["a"]["dtype"] == "I64" and header["m"]["dtype"] == "BOOL"
    start, end = header["b"]["data_offsets"]
    np.testing.assert_array_equal(np.frombuffer(data[start:end], "<f4"), np.arange(6))
    loaded, metadata = read_safetensors(path)
    assert metadata == {"format": "pt"}
    for name, value in tensors.items():
        assert loaded[name].shape == value.shape
        np.testing.assert_array_equal(loaded[name], value)

    # BF16 (no NumPy dtype): the upper 16 bits of float32, widened on reading.
    values = np.array([1.0, -2.5, 3.140625], "float32")
    bf16 = (values.view(np.uint32) >> 16).astype("<u2")
    header = json.dumps({"w": {"dtype": "BF16", "shape": [3], "data_offsets": [0, 6]}}).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header + bf16.tobytes())
    np.testing.assert_array_equal(read_safetensors(path)[0]["w"], values)

    header = json.dumps({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header + bytes(8))
    with pytest.raises(ValueError, match=r"tensor 'w' of shape \(3,\) and dtype F32 needs 12 bytes"):
        read_safetensors(path)
    header = json.dumps({"w": {"dtype": "F32", "shape": [3]}}).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header)
    with pytest.raises(ValueError, match="tensor 'w' has no dtype / shape / data_offsets entry"):
        read_safetensors(path)
    with open(path, "wb") as f:
        f.write(b"not a safetensors file")
    with pytest.raises(ValueError, match="is not a safetensors file"):
        read_safetensors(path)
    with pytest.raises(ValueError, match=r"`tensors\['c'\]` has dtype complex64"):
        write_safetensors(path, {"c": np.zeros(2, "complex64")})


def test_safetensors_package_reads_and_writes_the_same_files(tmp_path):
    import safetensors.numpy as safetensors_numpy  # the test extra installs it

    tensors = {"x": np.arange(12, dtype="float32").reshape(3, 4), "i": np.array([3, 1], "int32")}
    ours, theirs = str(tmp_path / "ours.safetensors"), str(tmp_path / "theirs.safetensors")
    write_safetensors(ours, tensors, metadata={"format": "pt"})
    safetensors_numpy.save_file(tensors, theirs, metadata={"format": "pt"})
    for path in (ours, theirs):
        for loaded in (safetensors_numpy.load_file(path), read_safetensors(path)[0]):
            for name, value in tensors.items():
                np.testing.assert_array_equal(loaded[name], value)
