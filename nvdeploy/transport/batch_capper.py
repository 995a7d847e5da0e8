"""The node side's output capper: one process per batch that keeps, counts and drains every command's output.

Sent inside the batch script (transport/batch.py) and run on the node as ``python3 -I -S -c CODE DIR SPEC...``,
where each SPEC is ``INDEX:CAP`` or ``INDEX:CAP:t`` (keep stdout's tail rather than its head). For each command it
reads the FIFOs ``DIR/INDEX.po`` and ``DIR/INDEX.pe`` (the command's stdout and stderr) to their end, keeps at most
CAP bytes of each in ``INDEX.o`` / ``INDEX.e`` and writes how many bytes it read beyond those into ``INDEX.on`` /
``INDEX.en`` when the stream ended: the files the shell cappers (``head -c CAP`` then ``wc -c``, per stream) write,
so the frames are built the same way. It drains everything, so a tool is never cut short by a closed pipe.

It opens every FIFO without blocking before it says ``ok`` on its stdout; the script starts the commands only after
that line, and uses the shell cappers when the line does not come. Linux reports no hang-up on a FIFO that has
never had a writer, so a FIFO whose command has not opened it yet is simply not ready. It exits 0 when every stream
has ended; anything else (a full disk, say) ends it with another status, which the script reports as an error for
every command rather than frame what it had.

It runs on the node's system Python: 3.6 or newer, standard library only, no annotation evaluated at run time.
"""

import os
import select
import sys

READ_SIZE = 65536


class Stream:
    """One command's stdout or stderr: what is kept of it and how much came."""

    def __init__(self, kept_path: str, cap: int, keep_tail: bool) -> None:
        self.kept_path = kept_path
        self.cap = cap
        self.keep_tail = keep_tail
        self.kept_fd = os.open(kept_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        self.kept = 0
        self.total = 0
        self.tail = bytearray()

    def take(self, data: bytes) -> None:
        self.total += len(data)
        if self.keep_tail:
            self.tail += data
            if len(self.tail) > self.cap:
                del self.tail[: len(self.tail) - self.cap]
        elif self.kept < self.cap:
            part = data[: self.cap - self.kept]
            write_all(self.kept_fd, part)
            self.kept += len(part)

    def finish(self) -> None:
        if self.keep_tail:
            write_all(self.kept_fd, bytes(self.tail))
            self.kept = len(self.tail)
        os.close(self.kept_fd)
        count = os.open(self.kept_path + "n", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        write_all(count, b"%d\n" % (self.total - self.kept))
        os.close(count)


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def main(args: "list[str]") -> int:
    folder, specs = args[0], args[1:]
    streams = {}
    poller = select.poll()
    for spec in specs:
        index, cap, *flags = spec.split(":")
        for fifo, kept, keep_tail in ((".po", ".o", flags == ["t"]), (".pe", ".e", False)):
            fd = os.open(os.path.join(folder, index + fifo), os.O_RDONLY | os.O_NONBLOCK)
            streams[fd] = Stream(os.path.join(folder, index + kept), int(cap), keep_tail)
            poller.register(fd, select.POLLIN)
    os.write(1, b"ok\n")
    # Nothing more goes to the script: its read of the ready line must not wait on us.
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.close(null)
    while streams:
        for fd, _events in poller.poll():
            try:
                data = os.read(fd, READ_SIZE)
            except BlockingIOError:  # a writer is there but has written nothing yet
                continue
            if data:
                streams[fd].take(data)
                continue
            # End of file: every writer of this FIFO has closed it.
            poller.unregister(fd)
            os.close(fd)
            streams.pop(fd).finish()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
