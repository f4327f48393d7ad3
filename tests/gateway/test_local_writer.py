"""raycep local writes its match lines in a background thread (gateway.cli.writer): the same
bytes in the same order as a plain write, bounded memory when the disk or pipe is slow, and a
clear error (exit 2, no traceback) when the output cannot be written."""
from __future__ import annotations

import io
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from raycep.cep.io.output import Fragments
from raycep.gateway.cli.common import UsageError
from raycep.gateway.cli.writer import QUEUE_PIECES, WRITE_BYTES, BackgroundWriter

ROOT = Path(__file__).resolve().parents[2]
QUERY = "PATTERN SEQ(A a, B b) WHERE a.x < b.x WITHIN 50 seconds"


class Slow(io.BytesIO):
    """A stream whose writes wait until ``gate`` is set, counting the writes begun."""

    def __init__(self):
        super().__init__()
        self.gate = threading.Event()
        self.begun = 0

    def write(self, data):
        self.begun += 1
        self.gate.wait(10)
        return super().write(data)

    def close(self):
        self.closed_value = self.getvalue()
        super().close()


def test_pieces_are_written_in_order_and_closed():
    stream = Slow()
    stream.gate.set()
    writer = BackgroundWriter(stream)
    pieces = [f"{k}\n".encode() * (k % 7 + 1) for k in range(500)]
    for piece in pieces:
        writer.write(piece)
    writer.write(b"")
    writer.close()
    writer.close()                                   # a second close does nothing
    assert stream.closed_value == b"".join(pieces)
    assert stream.closed


def test_a_slow_stream_holds_the_producer_back():
    stream = Slow()
    writer = BackgroundWriter(stream, owned=False)
    done = threading.Event()

    def produce():
        for k in range(QUEUE_PIECES + 5):
            writer.write(b"%d," % k)
        done.set()
    producer = threading.Thread(target=produce)
    producer.start()
    time.sleep(0.3)
    assert not done.is_set()                       # the queue is full: write() waits
    assert stream.begun == 1
    stream.gate.set()
    producer.join(10)
    assert done.is_set()
    writer.flush()
    assert stream.getvalue() == b"".join(b"%d," % k for k in range(QUEUE_PIECES + 5))
    writer.close()
    assert not stream.closed                       # not owned (stdout): flushed, kept open


class Failing(io.BytesIO):
    def write(self, data):
        raise OSError(28, "No space left on device")


def test_a_failed_write_is_raised_once_naming_the_output():
    writer = BackgroundWriter(Failing(), name="matches to out.jsonl")
    writer.write(b"x")
    with pytest.raises(UsageError, match="cannot write matches to out.jsonl: No space left"):
        for _ in range(100):
            writer.write(b"y")
            time.sleep(0.01)
    writer.close()                                  # already reported: not raised again


def test_a_closed_pipe_stays_a_broken_pipe():
    class Closed(io.BytesIO):
        def write(self, data):
            raise BrokenPipeError(32, "Broken pipe")
    writer = BackgroundWriter(Closed(), owned=False)
    writer.write(b"x")
    with pytest.raises(BrokenPipeError):
        writer.close()


def _local(*args, stdout=subprocess.PIPE):
    return subprocess.run([sys.executable, "-m", "raycep", "local", "--query", QUERY,
                           *args], stdout=stdout, stderr=subprocess.PIPE, text=True,
                          cwd=str(ROOT), env={**os.environ, "PYTHONPATH": str(ROOT)},
                          timeout=120, check=False)


@pytest.fixture()
def events(tmp_path) -> Path:
    rows = ["type,ts,x"] + [f"{'AB'[k % 2]},{k},{k % 5}" for k in range(4000)]
    path = tmp_path / "events.csv"
    path.write_text("\n".join(rows) + "\n")
    return path


def test_raycep_local_on_a_full_disk_says_so(events):
    if not os.path.exists("/dev/full"):
        pytest.fail("this test needs Linux's /dev/full")
    done = _local("--events", str(events), "--out", "/dev/full")
    assert done.returncode == 2
    assert "raycep: error: cannot write matches to /dev/full: No space left on device" \
        in done.stderr
    assert "Traceback" not in done.stderr


def test_raycep_local_writes_the_same_lines_to_stdout_and_to_a_file(events, tmp_path):
    out = tmp_path / "m.jsonl"
    to_file = _local("--events", str(events), "--out", str(out))
    to_stdout = _local("--events", str(events))
    assert to_file.returncode == to_stdout.returncode == 0, to_file.stderr + to_stdout.stderr
    lines = to_stdout.stdout.splitlines()
    assert lines[-1].startswith('{"events": 4000')          # the summary comes last
    assert "\n".join(lines[:-1]) + "\n" == out.read_text()
    assert len(lines) - 1 > 1000


def _fragments(lines: list) -> Fragments:
    """``lines`` cut into fragments of up to 5 bytes (as cep.io.output leaves them unjoined)."""
    return Fragments([line[k:k + 5] for line in lines for k in range(0, len(line), 5)])


def test_fragments_are_written_in_order_with_the_bytes_around_them(tmp_path):
    """Fragments are joined by the writer and go to the file after what was written before
    them and before what follows, to a file or to a stream without a file descriptor."""
    lines = [f'{{"n":{k},"pad":"{"x" * (k % 7)}"}}\n'.encode() for k in range(200)]
    path = tmp_path / "out.jsonl"
    out = BackgroundWriter(open(path, "wb"), True)
    out.write(b"first\n")
    out.write(_fragments(lines[:120]))
    out.write(b"middle\n")
    out.write(_fragments(lines[120:]))
    out.close()
    assert path.read_bytes() == b"first\n" + b"".join(lines[:120]) + b"middle\n" + \
        b"".join(lines[120:])
    memory = io.BytesIO()
    memory.close = lambda: None
    out = BackgroundWriter(memory, True)
    out.write(_fragments(lines))
    out.close()
    assert memory.getvalue() == b"".join(lines)


def test_a_large_piece_is_written_a_mebibyte_at_a_time(tmp_path):
    """A piece larger than WRITE_BYTES reaches the stream in writes of at most WRITE_BYTES,
    in order (a larger write call was several times slower in the kernel on a VM)."""
    sizes = []

    class Recording(io.BytesIO):
        def write(self, data):
            sizes.append(len(data))
            return super().write(data)

        def close(self):
            pass
    big = bytes(range(256)) * (WRITE_BYTES // 256 * 2 + 100)     # > 2 * WRITE_BYTES
    lines = _fragments([big[k:k + 997] for k in range(0, len(big), 997)])
    stream = Recording()
    out = BackgroundWriter(stream, True)
    out.write(b"head\n")
    out.write(big)
    out.write(lines)
    out.close()
    assert stream.getvalue() == b"head\n" + big + big
    assert max(sizes) == WRITE_BYTES and len(sizes) >= 7
