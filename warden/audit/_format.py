"""The on-disk formats of the audit log, as pure encode/decode functions (no I/O).

* **Frames** (``entries.log``, ``checkpoints.log``): ``0xFF | type | length u32be | payload | crc32 u32be`` where
  the CRC-32 (zlib) covers type, length and payload. The CRC only finds torn or garbled tails after a crash;
  integrity comes from the Merkle tree. ``0xFF`` never occurs in UTF-8, so a frame start is unambiguous.
* **Head** (``head``): 112 bytes rewritten in place after every batch, never fsynced: the committed size, where
  the entries end, the root, the last published checkpoint and where ``checkpoints.log`` ends. It is how
  concurrent writers find the current tree without scanning. Because it is written only *after* the batch's
  ``fdatasync``, whatever version of it reaches the disk never claims more than is durable.
* **State** (``state``): the durable recovery anchor, JSON, replaced atomically (tmp, fsync, rename, dir fsync)
  each time a checkpoint is published.
"""

from __future__ import annotations

import base64
import json
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

from warden.audit._merkle import HASH_SIZE

__all__ = [
    "FRAME_NOTE",
    "FRAME_OVERHEAD",
    "FRAME_RECORD",
    "HEAD_SIZE",
    "LOG_FORMAT",
    "Frame",
    "Head",
    "State",
    "decode_head",
    "decode_state",
    "encode_frame",
    "encode_head",
    "encode_state",
    "scan_frames",
]

LOG_FORMAT: Final = "warden-audit/1"
STATE_FORMAT: Final = "warden-audit-state/1"
FRAME_RECORD: Final = 0x01
FRAME_NOTE: Final = 0x02
FRAME_HEADER: Final = struct.Struct(">BBI")
FRAME_CRC: Final = struct.Struct(">I")
FRAME_OVERHEAD: Final = FRAME_HEADER.size + FRAME_CRC.size
MAX_FRAME_PAYLOAD: Final = 65_535
_HEAD: Final = struct.Struct(">4sQQ32sQ32sQQ")
_HEAD_MAGIC: Final = b"WAH1"
HEAD_SIZE: Final = _HEAD.size + FRAME_CRC.size


def encode_frame(kind: int, payload: bytes) -> bytes:
    header = FRAME_HEADER.pack(0xFF, kind, len(payload))
    return header + payload + FRAME_CRC.pack(zlib.crc32(payload, zlib.crc32(header[1:])))


@dataclass(frozen=True, slots=True)
class Frame:
    """One frame found by :func:`scan_frames`: where it starts and ends in the file, and its payload."""

    start: int
    end: int
    kind: int
    payload: bytes


def scan_frames(data: bytes | memoryview, offset: int = 0, kind: int | None = None) -> Iterator[Frame]:
    """Yield the valid frames of ``data`` from ``offset`` until the first invalid or incomplete one.

    The caller compares the last frame's ``end`` with ``len(data)`` to learn whether a torn tail follows.
    """
    view = memoryview(data)
    n = len(view)
    header_size = FRAME_HEADER.size
    while offset + FRAME_OVERHEAD <= n:
        magic, k, length = FRAME_HEADER.unpack_from(view, offset)
        if magic != 0xFF or (kind is not None and k != kind) or length > MAX_FRAME_PAYLOAD:
            return
        end = offset + FRAME_OVERHEAD + length
        if end > n:
            return
        payload = view[offset + header_size : end - 4]
        crc = zlib.crc32(payload, zlib.crc32(view[offset + 1 : offset + header_size]))
        if FRAME_CRC.unpack_from(view, end - 4)[0] != crc:
            return
        yield Frame(offset, end, k, bytes(payload))
        offset = end


@dataclass(frozen=True, slots=True)
class Head:
    """The volatile shared head (see module docstring)."""

    size: int
    entries_end: int
    root: bytes
    published_size: int
    published_root: bytes
    published_at_ms: int
    notes_end: int


def encode_head(head: Head) -> bytes:
    body = _HEAD.pack(_HEAD_MAGIC, head.size, head.entries_end, head.root, head.published_size,
                      head.published_root, head.published_at_ms, head.notes_end)
    return body + FRAME_CRC.pack(zlib.crc32(body))


def decode_head(data: bytes) -> Head | None:
    """The head, or None if the bytes are missing, torn or from another format."""
    if len(data) < HEAD_SIZE:
        return None
    body = data[: _HEAD.size]
    if FRAME_CRC.unpack_from(data, _HEAD.size)[0] != zlib.crc32(body):
        return None
    magic, size, entries_end, root, pub_size, pub_root, pub_at, notes_end = _HEAD.unpack(body)
    if magic != _HEAD_MAGIC or pub_size > size:
        return None
    return Head(size, entries_end, root, pub_size, pub_root, pub_at, notes_end)


@dataclass(frozen=True, slots=True)
class State:
    """The durable anchor: ``size`` records, ending at byte ``entries_end`` of entries.log, with ``root``."""

    size: int
    entries_end: int
    root: bytes


def encode_state(state: State) -> bytes:
    doc = {"format": STATE_FORMAT, "size": state.size, "entries_end": state.entries_end,
           "root": base64.b64encode(state.root).decode("ascii")}
    return (json.dumps(doc, sort_keys=True) + "\n").encode()


def decode_state(data: bytes) -> State:
    """Parse the state file; raises ``ValueError`` with the reason if it is not a valid state."""
    doc = json.loads(data)
    if not isinstance(doc, dict) or doc.get("format") != STATE_FORMAT:
        raise ValueError("not a warden audit state file")
    size, end, root = doc.get("size"), doc.get("entries_end"), doc.get("root")
    if (type(size) is not int or type(end) is not int or size < 0 or end < 0  # bool is not a size
            or not isinstance(root, str)):
        raise ValueError("state file fields are missing or of the wrong type")
    raw = base64.b64decode(root, validate=True)
    if len(raw) != HASH_SIZE:
        raise ValueError("state root is not a 32-byte hash")
    return State(size, end, raw)
