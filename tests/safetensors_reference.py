"""A safetensors writer for the checkpoint tests, written from the format's documentation and independent of
``attnlayers.applications.core.formats.safetensors`` (the module under test): an 8-byte little-endian header length, a
JSON header {name: {dtype, shape, data_offsets}}, then the little-endian tensor bytes."""

import json
import struct

import numpy as np

_DTYPES = {"float32": "F32", "float16": "F16", "int64": "I64", "uint8": "U8"}


def write_safetensors(path, tensors):
    """Writes {name: NumPy array} to ``path`` as Hugging Face's ``save_pretrained`` does (format "pt")."""
    header, offset, chunks = {"__metadata__": {"format": "pt"}}, 0, []
    for name, array in tensors.items():
        raw = np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": _DTYPES[str(array.dtype)], "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    encoded = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(encoded)) + encoded + b"".join(chunks))
