"""A download's frames read back a record batch at a time, from the file its body was spooled to.

A download of a million changes is hundreds of megabytes of rows once unpacked: read whole, it took 1.3 GB of a
device's memory. Here the body (``frames.py``: frames of a zstd-compressed Arrow stream each) stays in its file; a
frame is unpacked as a stream (``pyarrow.CompressedInputStream``) and its rows come out one record batch at a time
(a writer cuts them at ``frames.FRAME_ROWS``), so what is in memory at once is one record batch, whatever the
download's size. The device reads the download twice (``subscriber.apply_download``): its keys first (which batch
each row belongs to, which appearance of a row is its last), then its rows, each batch applied as soon as all of its
rows have gone by.

Unpacking a frame is bounded as reading it whole was: the frames' headers say what each unpacks to, and no read
goes past it; a single record batch is refused when it says it is larger than ``limit``.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any, BinaryIO

from sparksync.errors import ProtocolError, RequestTooLarge
from sparksync.merge.session.remote.frames import (
    HEADER,
    MAGIC,
    MAX_STREAM,
    META,
    from_wire,
    metadata_of,
    not_arrow,
    wire_schema,
)


class _Region(io.RawIOBase):
    """``length`` bytes of ``fh`` from ``start``, read without moving what other regions of it read."""

    def __init__(self, fh: BinaryIO, start: int, length: int):
        self.fh, self.at, self.end = fh, start, start + length

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        n = min(len(b), self.end - self.at)
        if n <= 0:
            return 0
        self.fh.seek(self.at)
        data = self.fh.read(n)          # a compressed chunk (Arrow asks for 64 KiB at a time)
        memoryview(b)[:len(data)] = data
        self.at += len(data)
        return len(data)


class _Said(io.RawIOBase):
    """An unpacked frame, refused as soon as it is read past the size its header said, or when one read (a
    record batch's body) asks for more than ``limit`` bytes."""

    def __init__(self, stream, size: int, limit: int, what: str):
        self.stream, self.left, self.limit, self.what = stream, size, limit, what

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1):
        """A buffer of Arrow's memory pool, as the stream unpacked it (not a copy of it in Python's heap)."""
        if n is None or n < 0 or n > self.left:
            raise ProtocolError(f"{self.what}: a frame unpacks to more than its header says", obj=self.what)
        if n > self.limit:
            raise RequestTooLarge(f"{self.what}: a record batch of {n:,} bytes, more than this side takes at once",
                                  obj=self.what)
        data = self.stream.read_buffer(n)
        self.left -= data.size
        return data

    def readinto(self, b) -> int:
        data = self.read(len(b))
        memoryview(b)[:data.size] = memoryview(data)
        return data.size


class Download:
    """The frames of a download in ``fh`` (a seekable file of them, from its start): their number and the first
    one's metadata at once (each frame's header read, nothing unpacked but the metadata), their rows on demand."""

    def __init__(self, fh: BinaryIO, what: str = "download", limit: int = MAX_STREAM):
        self.fh, self.what, self.limit = fh, what, limit
        self.frames: list[tuple[int, int, int]] = []        # (where its packed bytes start, unpacked size, packed size)
        fh.seek(0, io.SEEK_END)
        end = fh.tell()
        at, head = 0, len(MAGIC) + HEADER.size
        while at < end or not self.frames:
            fh.seek(at)
            first = fh.read(head)
            if len(first) < head or first[:len(MAGIC)] != MAGIC:
                where = "it does not start" if at == 0 else f"frame {len(self.frames) + 1} does not start"
                raise ProtocolError(f"{what}: not frames of changes ({where} with this protocol's header)", obj=what)
            size, packed = HEADER.unpack(first[len(MAGIC):])
            if end < at + head + packed:
                raise ProtocolError(f"{what}: not frames of changes (frame {len(self.frames) + 1} is truncated: "
                                    f"{end - at - head:,} of {packed:,} bytes)", obj=what)
            self.frames.append((at + head, size, packed))
            at += head + packed
        self.metadata = self._open(0)[1]

    @classmethod
    def of_bytes(cls, body: bytes, what: str = "download", limit: int = MAX_STREAM) -> Download:
        return cls(io.BytesIO(body), what, limit)

    def __len__(self) -> int:
        return len(self.frames)

    def _open(self, i: int) -> tuple[Any, dict]:
        """Frame ``i`` opened: (its unpacked stream past the metadata, the metadata)."""
        import pyarrow as pa

        start, size, packed = self.frames[i]
        try:
            stream = _Said(pa.CompressedInputStream(pa.PythonFile(_Region(self.fh, start, packed), mode="r"), "zstd"),
                           size, self.limit, self.what)
            (n,) = META.unpack(stream.read(META.size).to_pybytes())
            raw = stream.read(n).to_pybytes()
        except (pa.ArrowException, OSError, ValueError) as e:
            raise not_arrow(self.what, e) from None
        return stream, metadata_of(raw, self.what)

    def read(self, columns: list[str] | None = None) -> Iterator[tuple[int, Any]]:
        """Every frame's rows in order, a record batch at a time, (the frame's index, the rows): as change rows
        (``frames.change_schema``), or only the wire ``columns`` named (as they travel: no row put back together)."""
        import pyarrow as pa

        schema = wire_schema()
        for i in range(len(self.frames)):
            stream, meta = self._open(i)
            try:
                messages = pa.ipc.MessageReader.open_stream(pa.PythonFile(stream, mode="r"))
                while True:
                    try:
                        message = messages.read_next_message()
                    except StopIteration:
                        break
                    if message.type != "record batch":
                        raise ValueError(f"a {message.type} message where record batches were expected")
                    table = pa.Table.from_batches([pa.ipc.read_record_batch(message, schema)])
                    if columns is not None:
                        table = table.select(columns)
                    table.validate(full=True)         # offsets, UTF-8: a forged buffer is refused here, not later
                    yield i, table if columns is not None else from_wire(table, meta, self.what)
            except (pa.ArrowException, OSError, ValueError) as e:     # UnicodeDecodeError is a ValueError
                raise not_arrow(self.what, e) from None
