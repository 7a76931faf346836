"""Write a push's safetensors file over the one two pushes back, in place.

Every push of a run writes the same names, shapes and dtypes: only the values change. A file allocated anew
costs the trainer more than the copy of its bytes (the filesystem allocates its blocks again; an overwrite of
a file of the same size only copies). So a sync hands its oldest kept
directory to the next write (run_dir.atomic_directory's `reuse`), and `save_file` here overwrites the data
of the file it finds there when that file's header is the one safetensors would write for these tensors:
the result is, byte for byte, what `safetensors.torch.save_file` writes, which it calls otherwise.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import BinaryIO


def save_file(tensors: dict, path: Path, metadata: dict[str, str] | None = None) -> None:
    """`safetensors.torch.save_file(tensors, path, metadata)`, in place where `rewrite` can."""
    if not rewrite(tensors, path, metadata):
        from safetensors.torch import save_file as write_new

        write_new(tensors, str(path), metadata=metadata)


def rewrite(tensors: dict, path: Path, metadata: dict[str, str] | None = None) -> bool:
    """Overwrite the data of the file at `path` with `tensors`, in place, when its header is the one they
    would be written with; False (and nothing written) when it is not."""
    import torch

    try:
        f = open(path, "r+b")
    except OSError:
        return False
    with f:
        spans = data_spans(f, tensors, metadata)
        if spans is None:
            return False
        for start, name in spans:
            f.seek(start)
            f.write(memoryview(tensors[name].detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy()))
    return True


def data_spans(f: BinaryIO, tensors: dict, metadata: dict[str, str] | None) -> list[tuple[int, str]] | None:
    """Where each tensor's bytes start in the open file `f`, when its header holds exactly these names with
    these dtypes and shapes, this metadata, and data that fills the rest of the file with no gap or overlap;
    None when it does not (another model, a file cut short, not safetensors)."""
    try:
        size = os.fstat(f.fileno()).st_size
        (header_len,) = struct.unpack("<Q", f.read(8))
        if header_len > size:
            return None
        header = json.loads(f.read(header_len))
    except (OSError, struct.error, ValueError):
        return None
    if header.pop("__metadata__", None) != metadata or header.keys() != tensors.keys():
        return None
    names = dtype_names()
    spans = []
    for name, tensor in tensors.items():
        entry = header[name]
        begin, end = entry["data_offsets"]
        if (entry["dtype"] != names.get(tensor.dtype) or entry["shape"] != list(tensor.shape)
                or end - begin != tensor.numel() * tensor.element_size()):
            return None
        spans.append((begin, end, name))
    spans.sort()
    data_start = 8 + header_len
    cursor = 0
    for begin, end, _ in spans:
        if begin != cursor:
            return None
        cursor = end
    if data_start + cursor != size:
        return None
    return [(data_start + begin, name) for begin, _, name in spans]


def dtype_names() -> dict:
    """torch dtype -> the name safetensors' header gives it (the format's spec); a dtype not here is written
    anew by safetensors itself."""
    import torch

    return {torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
            torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8",
            torch.bool: "BOOL"}
