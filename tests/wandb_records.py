"""Read a W&B offline run file (`run-*.wandb`) back with wandb's own protobuf records.

The file is a 7-byte header (":W&B", magic, version) then a LevelDB-style log: 32 KiB blocks of
chunks, each `crc32 (4) | length (2, LE) | type (1) | data`; type 1 is a whole record, 2/3/4 the
first/middle/last piece of one. Each record is a `wandb_internal.Record`.
"""

from __future__ import annotations

import struct
from pathlib import Path

from google.protobuf.message import DecodeError
from wandb.proto import wandb_internal_pb2 as pb

BLOCK = 32 * 1024
HEADER = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def read_records(path: str | Path) -> list[pb.Record]:
    data = Path(path).read_bytes()
    assert data[:4] == b":W&B", f"{path} is not a W&B run file"
    records, pending, pos = [], b"", HEADER
    while pos + 7 <= len(data):
        left_in_block = BLOCK - pos % BLOCK
        if left_in_block < 7:  # block trailer padding
            pos += left_in_block
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if pos + 7 + length > len(data):  # the chunk wandb's service is still writing
            break
        chunk = data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind == 0 and length == 0:
            pos += BLOCK - pos % BLOCK if pos % BLOCK else 0
            continue
        if kind in (FULL, FIRST):
            pending = chunk
        else:
            pending += chunk
        if kind in (FULL, LAST):
            record = pb.Record()
            record.ParseFromString(pending)
            records.append(record)
    return records


def finished_run_records(run_dir: str | Path, timeout: float = 20.0) -> list[pb.Record]:
    """The records of the one offline run under `run_dir`/wandb, once its `exit` record is on disk
    (wandb's service writes the file in the background and may lag `finish()` a little)."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        files = list(Path(run_dir).glob("wandb/offline-run-*/run-*.wandb"))
        if len(files) == 1:
            try:
                records = read_records(files[0])
            except DecodeError:  # read between two writes of one record: read again
                records = []
            if any(r.HasField("exit") for r in records):
                return records
        assert time.monotonic() < deadline, f"no finished W&B run file under {run_dir}: {files}"
        time.sleep(0.1)
