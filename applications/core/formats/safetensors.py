"""The safetensors format (https://huggingface.co/docs/safetensors), read and written with NumPy alone: an 8-byte
little-endian header length, a JSON header ``{name: {"dtype", "shape", "data_offsets"}}`` and the raw little-endian
bytes. That keeps the library free of a dependency for ~60 lines, and reads BF16 checkpoints (widened to float32),
which NumPy has no dtype for. Hugging Face checkpoints (``model.safetensors``) of every application use it.
"""

from __future__ import annotations

import json
import struct

import numpy as np

__all__ = ["read_safetensors", "write_safetensors"]

_DTYPES = {
    "F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4", "I16": "<i2", "I8": "i1",
    "U64": "<u8", "U32": "<u4", "U16": "<u2", "U8": "u1", "BOOL": "?",
}
_CODES = {np.dtype(v): k for k, v in _DTYPES.items()}  # looked up with the dtype in little-endian order


def read_safetensors(path):
    """The tensors of a ``.safetensors`` file, as NumPy arrays.

    Args:
        path: the file.

    Returns:
        ``(tensors, metadata)``: a dict name -> array of the stored shape (BF16 widened to float32), and the
        header's ``__metadata__`` dict (empty when absent).

    Raises:
        ValueError: naming the file (and the tensor) when the header or a tensor's extent is malformed, or a dtype
            is not supported (the FP8 ones).
    """
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError(f"{path!r} is not a safetensors file: {len(data)} bytes, fewer than the 8-byte header length.")
    (header_size,) = struct.unpack("<Q", data[:8])
    if 8 + header_size > len(data):
        raise ValueError(f"{path!r} is not a safetensors file: header length {header_size} exceeds the file size.")
    try:
        header = json.loads(data[8:8 + header_size].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{path!r} is not a safetensors file: its header is not JSON ({error}).") from None
    metadata = header.pop("__metadata__", None) or {}
    buffer, start = memoryview(data), 8 + header_size
    tensors = {}
    for name, entry in header.items():
        if not (isinstance(entry, dict) and isinstance(entry.get("shape"), list)
                and isinstance(entry.get("data_offsets"), list) and len(entry["data_offsets"]) == 2):
            raise ValueError(f"{path!r}: tensor {name!r} has no dtype / shape / data_offsets entry: {entry!r}.")
        dtype, shape, (begin, end) = entry.get("dtype"), tuple(entry["shape"]), entry["data_offsets"]
        if dtype not in _DTYPES and dtype != "BF16":
            raise ValueError(f"{path!r}: tensor {name!r} has dtype {dtype!r}; supported: {sorted(_DTYPES) + ['BF16']}.")
        itemsize = 2 if dtype == "BF16" else np.dtype(_DTYPES[dtype]).itemsize
        count = int(np.prod(shape, dtype=np.int64))
        if not 0 <= begin <= end <= len(data) - start or end - begin != count * itemsize:
            raise ValueError(
                f"{path!r}: tensor {name!r} of shape {shape} and dtype {dtype} needs {count * itemsize} bytes; its "
                f"data_offsets {[begin, end]} give {end - begin} in a {len(data) - start}-byte buffer."
            )
        raw = buffer[start + begin:start + end]
        if dtype == "BF16":  # the upper half of a float32: shift into place
            array = (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            array = np.frombuffer(raw, _DTYPES[dtype]).astype(np.dtype(_DTYPES[dtype]).newbyteorder("="))
        tensors[name] = array.reshape(shape)
    return tensors, dict(metadata)


def write_safetensors(path, tensors, metadata=None):
    """Writes NumPy arrays as a ``.safetensors`` file (tensors in name order, header padded to 8 bytes).

    Args:
        path: the file, written in place (:func:`save_hf_checkpoint` renames a temporary file onto its target).
        tensors: a dict name -> array (float64/32/16, int, uint, bool).
        metadata: an optional dict of str -> str, stored as ``__metadata__``.

    Raises:
        ValueError: naming a tensor whose dtype the format has no code for.
    """
    header, chunks, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for name in sorted(tensors):
        array = np.asarray(tensors[name])
        code = _CODES.get(array.dtype.newbyteorder("<"))
        if code is None:
            raise ValueError(f"`tensors[{name!r}]` has dtype {array.dtype}, which safetensors cannot store here.")
        raw = np.ascontiguousarray(array, dtype=np.dtype(_DTYPES[code])).tobytes()
        header[name] = {"dtype": code, "shape": list(array.shape), "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    encoded = json.dumps(header, separators=(",", ":")).encode("utf-8")
    encoded += b" " * (-len(encoded) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(encoded)))
        f.write(encoded)
        for raw in chunks:
            f.write(raw)
