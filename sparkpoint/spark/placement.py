"""Where Spark's hash partitioning puts a state key: ``pmod(murmur3(fields, seed 42), n)``, computed from the
key's UnsafeRow bytes as Spark's ``HashPartitioning`` does (catalyst ``Murmur3Hash``, unsafe
``Murmur3_x86_32``: strings and binaries by its legacy byte-wise tail, nulls leave the running hash as it is,
a struct is hashed field after field with the running hash as seed).

Used to rescale state that Spark's own repartitioner refuses (the HDFS-backed store). Types whose hash
sparkpoint does not reproduce are refused by name, before anything is written."""

from __future__ import annotations

import struct
from typing import Any

from sparkpoint.errors import RescaleRefusedError

SEED = 42
_MASK = 0xFFFFFFFF
_C1 = 0xCC9E2D51
_C2 = 0x1B873593
_LONG_DECIMAL_DIGITS = 18  # Decimal.MAX_LONG_DIGITS: wider decimals hash their BigInteger bytes

_INT_TYPES = {"byte": "<b", "short": "<h", "integer": "<i", "date": "<i", "boolean": "<?"}
_LONG_TYPES = {"long", "timestamp", "timestamp_ntz"}
# Where Spark's JSON schema marks a collated string: its hash is the collation's, not the bytes'.
_COLLATIONS = "__COLLATIONS"


def _rotl(value: int, bits: int) -> int:
    return ((value << bits) | (value >> (32 - bits))) & _MASK


def _mix_k1(k1: int) -> int:
    return (_rotl((k1 * _C1) & _MASK, 15) * _C2) & _MASK


def _mix_h1(h1: int, k1: int) -> int:
    return (_rotl(h1 ^ k1, 13) * 5 + 0xE6546B64) & _MASK


def _fmix(h1: int, length: int) -> int:
    h1 ^= length
    h1 ^= h1 >> 16
    h1 = (h1 * 0x85EBCA6B) & _MASK
    h1 ^= h1 >> 13
    h1 = (h1 * 0xC2B2AE35) & _MASK
    return h1 ^ (h1 >> 16)


def hash_int(value: int, seed: int) -> int:
    return _fmix(_mix_h1(seed, _mix_k1(value & _MASK)), 4)


def hash_long(value: int, seed: int) -> int:
    h1 = _mix_h1(seed, _mix_k1(value & _MASK))
    return _fmix(_mix_h1(h1, _mix_k1((value >> 32) & _MASK)), 8)


def hash_bytes(data: bytes, seed: int) -> int:
    """Spark's ``hashUnsafeBytes``: 4-byte little-endian words, then each trailing byte, sign-extended, as a
    word of its own (not murmur3's standard tail)."""
    aligned = len(data) - len(data) % 4
    h1 = seed
    for (word,) in struct.iter_unpack("<I", data[:aligned]):
        h1 = _mix_h1(h1, _mix_k1(word))
    for byte in data[aligned:]:
        h1 = _mix_h1(h1, _mix_k1((byte - 256 if byte > 127 else byte) & _MASK))
    return _fmix(h1, len(data))


# Spark hashes -0.0 as 0 and every NaN by Java's canonical bits (floatToIntBits): deduplication and
# flatMapGroupsWithState keys are not normalized before they reach state, so both occur there.
_FLOAT_NEGATIVE_ZERO, _FLOAT_NAN = -0x80000000, 0x7FC00000
_DOUBLE_NEGATIVE_ZERO, _DOUBLE_NAN = -0x8000000000000000, 0x7FF8000000000000


def float_bits(bits: int) -> int:
    if bits == _FLOAT_NEGATIVE_ZERO:
        return 0
    return _FLOAT_NAN if bits & 0x7FFFFFFF > 0x7F800000 else bits


def double_bits(bits: int) -> int:
    if bits == _DOUBLE_NEGATIVE_ZERO:
        return 0
    return _DOUBLE_NAN if bits & 0x7FFFFFFFFFFFFFFF > 0x7FF0000000000000 else bits


def signed(value: int) -> int:
    return value - (1 << 32) if value & 0x80000000 else value


class KeyHasher:
    """Hashes the first ``fields`` fields of UnsafeRow keys of one schema (Spark's JSON form of a struct type):
    the partition key of a state key (a join's index or a session's start are left out by the caller)."""

    def __init__(self, schema: dict[str, Any], fields: int, where: str):
        self.num_fields = len(schema["fields"])
        self._hashers = [_field_hasher(f, f["name"], where) for f in schema["fields"][:fields]]
        # Fixed-width fields are hashed a million at a time with numpy; others (strings, structs) row by row.
        self._vector_types = [_VECTOR_TYPES.get(f["type"] if isinstance(f["type"], str) else "")
                              for f in schema["fields"][:fields]]
        self._floating = [f["type"] in ("float", "double") for f in schema["fields"][:fields]]

    def partition(self, row: bytes, partitions: int) -> int:
        return signed(_hash_row(row, self._hashers, self.num_fields, SEED)) % partitions

    def partitions(self, rows: list[bytes], partitions: int) -> list[int]:
        """:meth:`partition` of each row, in order."""
        if None in self._vector_types or not rows:
            return [self.partition(row, partitions) for row in rows]
        by_length: dict[int, list[int]] = {}
        for index, row in enumerate(rows):
            by_length.setdefault(len(row), []).append(index)
        placed = [0] * len(rows)
        for indexes in by_length.values():
            for index, partition in zip(indexes, self._vector_partitions([rows[i] for i in indexes], partitions),
                                        strict=True):
                placed[index] = partition
        return placed

    def _vector_partitions(self, rows: list[bytes], partitions: int) -> list[int]:
        import numpy as np

        table = np.frombuffer(b"".join(rows), dtype=np.uint8).reshape(len(rows), -1)
        bitset = ((self.num_fields + 63) // 64) * 8
        h = np.full(len(rows), SEED, dtype=np.uint32)
        for index, (dtype, width) in enumerate(self._vector_types):
            slot = bitset + 8 * index
            value = np.ascontiguousarray(table[:, slot:slot + width]).view(dtype)[:, 0]
            if self._floating[index]:
                value = _vector_canonical(value, width)
            is_null = (table[:, index // 8] >> (index % 8)) & 1 == 1
            hashed = (_vector_hash_long(value.astype(np.int64), h) if width == 8
                      else _vector_hash_int(value.astype(np.int32), h))
            h = np.where(is_null, h, hashed)
        return np.mod(h.view(np.int32).astype(np.int64), partitions).tolist()


# Fixed-width types as their UnsafeRow slot holds them: (numpy dtype, bytes). Spark hashes the narrow ones
# as ints (sign-extended), the 8-byte ones as longs; floats and doubles by their bits.
_VECTOR_TYPES = {"boolean": ("<u1", 1), "byte": ("<i1", 1), "short": ("<i2", 2), "integer": ("<i4", 4),
                 "date": ("<i4", 4), "float": ("<i4", 4), "long": ("<i8", 8), "timestamp": ("<i8", 8),
                 "timestamp_ntz": ("<i8", 8), "double": ("<i8", 8)}


def _vector_canonical(bits, width: int):
    """:func:`float_bits` or :func:`double_bits` of a column."""
    import numpy as np

    zero, nan, exponent = ((_FLOAT_NEGATIVE_ZERO, _FLOAT_NAN, 0x7F800000) if width == 4 else
                           (_DOUBLE_NEGATIVE_ZERO, _DOUBLE_NAN, 0x7FF0000000000000))
    magnitude = bits & np.array(-1 - zero, dtype=bits.dtype)  # every bit but the sign
    bits = np.where(bits == zero, 0, bits).astype(bits.dtype)
    return np.where(magnitude > exponent, nan, bits).astype(bits.dtype)


def _vector_mix_k1(k1):
    import numpy as np

    k1 = k1 * np.uint32(_C1)
    k1 = (k1 << np.uint32(15)) | (k1 >> np.uint32(17))
    return k1 * np.uint32(_C2)


def _vector_mix_h1(h1, k1):
    import numpy as np

    h1 = h1 ^ k1
    h1 = (h1 << np.uint32(13)) | (h1 >> np.uint32(19))
    return h1 * np.uint32(5) + np.uint32(0xE6546B64)


def _vector_fmix(h1, length: int):
    import numpy as np

    h1 = h1 ^ np.uint32(length)
    h1 = h1 ^ (h1 >> np.uint32(16))
    h1 = h1 * np.uint32(0x85EBCA6B)
    h1 = h1 ^ (h1 >> np.uint32(13))
    h1 = h1 * np.uint32(0xC2B2AE35)
    return h1 ^ (h1 >> np.uint32(16))


def _vector_hash_int(values, seed):
    return _vector_fmix(_vector_mix_h1(seed, _vector_mix_k1(values.view("<u4"))), 4)


def _vector_hash_long(values, seed):
    import numpy as np

    low = (values & 0xFFFFFFFF).astype(np.uint32)
    high = ((values >> 32) & 0xFFFFFFFF).astype(np.uint32)
    h1 = _vector_mix_h1(seed, _vector_mix_k1(low))
    return _vector_fmix(_vector_mix_h1(h1, _vector_mix_k1(high)), 8)


def _hash_row(row: bytes, hashers: list, num_fields: int, seed: int) -> int:
    bitset = ((num_fields + 63) // 64) * 8
    h = seed
    for index, hasher in enumerate(hashers):
        if row[index // 8] >> (index % 8) & 1:  # the null bit: a null field leaves the hash as it is
            continue
        h = hasher(row, bitset + 8 * index, h)
    return h


def _field_hasher(field: dict[str, Any], name: str, where: str):
    """A function (row, slot offset, seed) -> hash for one field of an UnsafeRow."""
    data_type = field["type"]
    if _COLLATIONS in (field.get("metadata") or {}):
        data_type = "collated string"
    elif isinstance(data_type, dict) and data_type.get("type") == "struct":
        nested = [_field_hasher(f, f"{name}.{f['name']}", where) for f in data_type["fields"]]
        count = len(data_type["fields"])

        def struct_hash(row: bytes, slot: int, seed: int) -> int:
            start, size = _variable(row, slot)
            return _hash_row(row[start:start + size], nested, count, seed)

        return struct_hash
    if data_type in _INT_TYPES:
        fmt = _INT_TYPES[data_type]
        return lambda row, slot, seed: hash_int(int(struct.unpack_from(fmt, row, slot)[0]), seed)
    if data_type in _LONG_TYPES or _is_long_decimal(data_type):
        return lambda row, slot, seed: hash_long(struct.unpack_from("<q", row, slot)[0], seed)
    if data_type in ("string", "binary"):
        def bytes_hash(row: bytes, slot: int, seed: int) -> int:
            start, size = _variable(row, slot)
            return hash_bytes(row[start:start + size], seed)

        return bytes_hash
    if data_type == "float":
        return lambda row, slot, seed: hash_int(float_bits(struct.unpack_from("<i", row, slot)[0]), seed)
    if data_type == "double":
        return lambda row, slot, seed: hash_long(double_bits(struct.unpack_from("<q", row, slot)[0]), seed)
    raise RescaleRefusedError(
        f"{where}: key field {name!r} is of type {_type_name(data_type)}, whose hash partitioning sparkpoint does not "
        "reproduce; rescale state of this kind on the RocksDB state store, where Spark's repartitioner places it"
    )


def _variable(row: bytes, slot: int) -> tuple[int, int]:
    (offset_and_size,) = struct.unpack_from("<q", row, slot)
    return offset_and_size >> 32, offset_and_size & _MASK


def _is_long_decimal(data_type: Any) -> bool:
    if not (isinstance(data_type, str) and data_type.startswith("decimal(")):
        return False
    precision = int(data_type[len("decimal("):].split(",")[0])
    return precision <= _LONG_DECIMAL_DIGITS


def _type_name(data_type: Any) -> str:
    return data_type if isinstance(data_type, str) else str(data_type.get("type"))
