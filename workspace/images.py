"""An image's size read from its header, before Loop keeps or shows it as an image: a PNG of
1.2 MB may claim 20,000 by 20,000 pixels, which a browser decodes into 1.6 GB. PNG, GIF, JPEG and
WebP, the kinds Loop shows; anything else has no size here, and is not shown as an image. Below
the tools and the MCP servers, so an MCP tool's image and a file of the Files panel are judged by
one rule.
"""

import struct
from dataclasses import dataclass
from typing import BinaryIO

# The largest image Loop keeps or shows as one: a side a screen can use at any zoom, and as many
# pixels as a camera's photo (40 MP decodes to 160 MB in a browser).
MAX_SIDE = 10_000
MAX_PIXELS = 40_000_000
# A JPEG's size is in its frame header, after any number of other segments (EXIF, colour
# profiles, thumbnails): this many are walked before Loop gives up on finding it.
MAX_JPEG_SEGMENTS = 1_000
# A JPEG's frame headers (SOF0 to SOF15, without DHT, JPG and DAC, which share the range).
JPEG_FRAMES = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
JPEG_UNSIZED = frozenset({0x01, *range(0xD0, 0xD9)})  # markers with no length after them


@dataclass(frozen=True)
class Size:
    width: int
    height: int


def size_of(file: BinaryIO) -> Size | None:
    """The size the image's header gives, or None if it is none of the four kinds or its header
    is cut short, or gives no size. Reads from the start; leaves the file anywhere."""
    file.seek(0)
    head = file.read(30)
    size: Size | None
    if head.startswith(b"\x89PNG\r\n\x1a\n") and head[12:16] == b"IHDR":
        size = Size(*struct.unpack(">II", head[16:24]))
    elif head[:6] in (b"GIF87a", b"GIF89a") and len(head) >= 10:
        size = Size(*struct.unpack("<HH", head[6:10]))
    elif head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        size = webp_size(head)
    elif head[:3] == b"\xff\xd8\xff":
        size = jpeg_size(file)
    else:
        size = None
    return size if size is not None and size.width and size.height else None


def webp_size(head: bytes) -> Size | None:
    """From the first chunk: a lossy frame (VP8), a lossless one (VP8L) or the canvas (VP8X)."""
    chunk = head[12:16]
    if chunk == b"VP8 " and head[23:26] == b"\x9d\x01\x2a" and len(head) >= 30:
        width, height = struct.unpack("<HH", head[26:30])
        return Size(width & 0x3FFF, height & 0x3FFF)
    if chunk == b"VP8L" and head[20:21] == b"\x2f" and len(head) >= 25:
        bits = int.from_bytes(head[21:25], "little")
        return Size((bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1)
    if chunk == b"VP8X" and len(head) >= 30:
        width = int.from_bytes(head[24:27], "little") + 1
        return Size(width, int.from_bytes(head[27:30], "little") + 1)
    return None


def jpeg_size(file: BinaryIO) -> Size | None:
    """From the frame header, the segments before it skipped by their lengths."""
    file.seek(2)
    for _ in range(MAX_JPEG_SEGMENTS):
        marker = file.read(2)
        while marker[:1] == b"\xff" and marker[1:] == b"\xff":  # fill bytes before a marker
            marker = marker[1:] + file.read(1)
        if len(marker) < 2 or marker[0] != 0xFF:
            return None
        if marker[1] in JPEG_UNSIZED:
            continue
        if marker[1] in (0xD9, 0xDA):  # the end, or the scan: no frame header before it
            return None
        length = file.read(2)
        if len(length) < 2 or struct.unpack(">H", length)[0] < 2:
            return None
        if marker[1] in JPEG_FRAMES:
            frame = file.read(5)  # precision, height, width
            if len(frame) < 5:
                return None
            height, width = struct.unpack(">HH", frame[1:5])
            return Size(width, height)
        file.seek(struct.unpack(">H", length)[0] - 2, 1)
    return None


def why_not_shown(file: BinaryIO) -> str | None:
    """Why the image is not kept or shown as one (the end of a sentence about it, for the
    person or the model), or None if it may be."""
    size = size_of(file)
    if size is None:
        return "its header gives no size of a PNG, GIF, JPEG or WebP image"
    if max(size.width, size.height) > MAX_SIDE or size.width * size.height > MAX_PIXELS:
        return (
            f"it is {size.width:,} by {size.height:,} pixels, over the {MAX_SIDE:,} a side or "
            f"{MAX_PIXELS:,} in all that Loop keeps or shows"
        )
    return None
