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


def signed(value: int) -> int:
    return value - (1 << 32) if value & 0x80000000 else value


class KeyHasher:
    """Hashes the first ``fields`` fields of UnsafeRow keys of one schema (Spark's JSON form of a struct type):
    the partition key of a state key (a join's index or a session's start are left out by the caller)."""

    def __init__(self, schema: dict[str, Any], fields: int, where: str):
        self.num_fields = len(schema["fields"])
        self._hashers = [_field_hasher(f, f["name"], where) for f in schema["fields"][:fields]]

    def partition(self, row: bytes, partitions: int) -> int:
        return signed(_hash_row(row, self._hashers, self.num_fields, SEED)) % partitions


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
        # Spark normalizes -0.0 and NaN in grouping and join keys before they reach state (NormalizeFloatingNumbers).
        return lambda row, slot, seed: hash_int(struct.unpack_from("<i", row, slot)[0], seed)
    if data_type == "double":
        return lambda row, slot, seed: hash_long(struct.unpack_from("<q", row, slot)[0], seed)
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
