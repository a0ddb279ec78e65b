"""C2SP tlog-tiles: the static layout a transparency log is published in. Pure except :func:`write_tiles`.

``warden audit export --tiles DIR`` writes the log up to its latest checkpoint in this layout, so it can be
served by any static web server (or copied anywhere) and checked by standard tlog clients and witnesses. The
level-``L`` tile ``N`` holds the hashes of the perfect subtrees of height ``8L`` numbered ``256N .. 256N+255``:
exactly the stored hashes at level ``8L``, so tiles are cut straight out of ``hashes.bin``.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Final

from warden.audit._merkle import HashReader, stored_hash_index

__all__ = ["TILE_WIDTH", "entries_path", "entry_bundle", "tile_data", "tile_index_path", "tile_path", "write_tiles"]

TILE_WIDTH: Final = 256
_LEN: Final = struct.Struct(">H")


def tile_index_path(n: int) -> str:
    """``1234067`` -> ``x001/x234/067``: zero-padded 3-digit groups, all but the last prefixed ``x``."""
    if n < 0:
        raise ValueError("tile index must be >= 0")
    groups = [f"{n % 1000:03d}"]
    n //= 1000
    while n:
        groups.append(f"x{n % 1000:03d}")
        n //= 1000
    return "/".join(reversed(groups))


def _suffix(width: int) -> str:
    if not 1 <= width <= TILE_WIDTH:
        raise ValueError(f"tile width {width} is not in 1..{TILE_WIDTH}")
    return "" if width == TILE_WIDTH else f".p/{width}"


def tile_path(level: int, n: int, width: int = TILE_WIDTH) -> str:
    return f"tile/{level}/{tile_index_path(n)}{_suffix(width)}"


def entries_path(n: int, width: int = TILE_WIDTH) -> str:
    return f"tile/entries/{tile_index_path(n)}{_suffix(width)}"


def entry_bundle(entries: Iterable[bytes]) -> bytes:
    """Entries as a bundle: each prefixed with its length as a big-endian uint16."""
    out = bytearray()
    for e in entries:
        if len(e) > 0xFFFF:
            raise ValueError(f"an entry of {len(e)} bytes does not fit a tile bundle")
        out += _LEN.pack(len(e))
        out += e
    return bytes(out)


def tile_data(level: int, n: int, width: int, read: HashReader) -> bytes:
    """The ``width`` hashes of tile ``n`` at ``level`` from the stored-hash layout."""
    first = n * TILE_WIDTH
    return b"".join(read([stored_hash_index(8 * level, first + i) for i in range(width)]))


def _tiles_for(size: int) -> list[tuple[int, int, int]]:
    """(level, index, width) of every tile of a tree of ``size`` leaves."""
    out = []
    level = 0
    while size >> (8 * level):
        count = size >> (8 * level)  # hashes at this tile level
        for n in range(count // TILE_WIDTH):
            out.append((level, n, TILE_WIDTH))
        if count % TILE_WIDTH:
            out.append((level, count // TILE_WIDTH, count % TILE_WIDTH))
        level += 1
    return out


def write_tiles(out_dir: Path, size: int, checkpoint_note: bytes, read: HashReader,
                entries: Sequence[bytes]) -> int:
    """Write ``checkpoint``, every hash tile and every entry bundle of the first ``size`` entries; return files."""
    files: dict[str, bytes] = {"checkpoint": checkpoint_note}
    for level, n, width in _tiles_for(size):
        files[tile_path(level, n, width)] = tile_data(level, n, width, read)
        if level == 0:
            files[entries_path(n, width)] = entry_bundle(entries[n * TILE_WIDTH : n * TILE_WIDTH + width])
    for rel, data in files.items():
        path = out_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)
    return len(files)
