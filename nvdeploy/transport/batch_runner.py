"""The node side of a batch, in one Python process: what batch.sh does, at the cost of one process for the batch.

Sent inside the batch script (transport/batch.py) and started by it, when the node has a system Python, as
``python3 -I -S -c CODE SETTINGS... COMMANDS...`` (see ``Settings`` for the words). It runs the whole batch the way
the shell batch (batch.sh) does, with the same output, so the controller cannot tell them apart:

- the run lock (``flock`` on the lock folder, the holder file made with O_EXCL, stale holders removed, a refused
  run names the live holder) and the folder checks of transport/node_paths.py;
- the password line and the one sudo check, printed early; each command under its own ``timeout(1)``, its stdout
  and stderr on pipes read by one ``poll`` loop that keeps at most CAP bytes of each (the head, or the tail) and
  counts the rest, in memory: no temp folder, no FIFOs, no cappers;
- the watcher: stdin is polled in the same loop; EOF, or (with a heartbeat) a whole ``2 x period`` without a byte,
  ends every process of the batch's session (TERM, a grace, KILL) and the batch;
- at the normal end, the session's strays outside our own process group are ended the same way; the frames, then
  the lock released and the holder file removed, then the end marker.

The session's processes are found with ``getsid(2)`` on each pid of /proc (no file read per process, unlike the
shell's grep of every /proc/PID/stat). Exit status: 0 when the batch ran (whatever its commands did); 3 when this
Python is too old and did nothing (the script then runs the shell batch); 90 when something failed after it began
(the batch then has no end marker, so the controller reports every command ERROR, never a result).

It runs on the node's system Python: 3.6 or newer, standard library only, no annotation evaluated at run time, and
it parses on older Pythons (no f-strings) so that they reach the version check.
"""

# The C modules themselves: the signal and stat modules import more (signal: enum), which costs a node milliseconds
# per batch.
import _signal as signal
import _stat as stat
import os
import select
import sys
import time

# The lines the controller reads (transport/batch.py; a test holds them equal).
END_MARKER = b"__NVD_BATCH_END__"
BUSY_MARKER = b"__NVD_BUSY__"
UNSAFE_MARKER = b"__NVD_UNSAFE__"
STARTED_MARKER = b"__NVD_STARTED__"
RAN_MARKER = b"__NVD_RAN__"
READ_SIZE = 65536
# What the shell batch keeps of sudo's answer: 4096 bytes in the early line, 65536 as a skipped command's stderr.
SUDO_LINE_MAX = 4096
SUDO_STDERR_MAX = 65536
# A holder line is short (user, run, pid, time): more than this is not one.
HOLDER_MAX = 4096
# Signals a child gets at their default: Python ignores SIGPIPE and SIGXFSZ, and this process HUP and INT.
CHILD_DEFAULTS = (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGHUP, signal.SIGINT)


class Ended(Exception):
    """The batch's stdin ended (or fell silent), or its stdout is gone: the run is over for this node."""


class Settings:
    """The script's words: ours, spare pid, grace ticks, heartbeat period, run id, lock, lock bases, root's
    lock, password, then the sudo check's argv (count, words; count 0: no check), then the commands (count, then
    per command its cap, flags, argv count and argv; transport/batch.py's _command_words). Flags: ``t`` keeps
    stdout's tail, ``p`` gives the command the password on its stdin, ``g`` runs it only when the sudo check
    passed; ``-`` none."""

    def __init__(self, words):
        words = list(words)
        self.ours = words.pop(0) == "1"
        self.spare_parent = int(words.pop(0) or 0)
        self.grace_ticks = int(words.pop(0))
        self.period = int(words.pop(0))
        self.run_id = words.pop(0)
        self.lock = words.pop(0) == "1"
        self.lock_bases = words.pop(0).split()
        self.root_lock = words.pop(0)
        self.password = words.pop(0) == "1"
        count = int(words.pop(0))
        self.sudo_check = words[:count]
        del words[:count]
        self.commands = []
        for _ in range(int(words.pop(0))):
            cap, flags, count = int(words.pop(0)), words.pop(0), int(words.pop(0))
            self.commands.append((cap, flags, words[:count]))
            del words[:count]


class Stream:
    """One stdout or stderr: at most ``cap`` bytes kept (its head, or with ``tail`` its end) and how many came."""

    def __init__(self, cap, tail):
        self.cap = cap
        self.tail = tail
        self.kept = bytearray()
        self.total = 0

    def take(self, data):
        self.total += len(data)
        if self.tail:
            self.kept += data
            # Cut back to the cap only when twice over it: a flood costs one copy per cap's worth, not per read.
            if len(self.kept) > 2 * self.cap + READ_SIZE:
                del self.kept[: len(self.kept) - self.cap]
        elif len(self.kept) < self.cap:
            self.kept += data[: self.cap - len(self.kept)]

    def result(self):
        if self.tail and len(self.kept) > self.cap:
            return bytes(self.kept[len(self.kept) - self.cap:])
        return bytes(self.kept)


def write_all(fd, data):
    view = memoryview(data)
    try:
        while view:
            view = view[os.write(fd, view):]
    except OSError:  # the channel is gone (EPIPE): the controller will not read the rest
        raise Ended() from None


def unsafe_folder(path, uid):
    """Why ``path`` is not safe to use (transport/node_paths.py's rule, and its words), or None."""
    if not path.startswith("/"):
        return "%s is not an absolute path" % path
    prefixes, prefix = ["/"], ""
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            return "%s goes through .." % path
        prefix += "/" + part
        prefixes.append(prefix)
    for prefix in prefixes:
        try:
            info = os.lstat(prefix)
        except OSError:
            return "%s cannot be checked (missing, or a folder above it cannot be read)" % path
        why = None
        if stat.S_ISLNK(info.st_mode):
            why = "is a symbolic link"
        elif not stat.S_ISDIR(info.st_mode):
            why = "is not a folder"
        elif info.st_uid not in (0, uid):
            why = "is owned by another user"
        elif info.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not (info.st_uid == 0 and info.st_mode & stat.S_ISVTX):
            why = "is writable by other users"
        if why is None:
            continue
        try:
            import pwd
            owner = pwd.getpwuid(info.st_uid).pw_name
        except (ImportError, KeyError):
            owner = str(info.st_uid)
        text = "%s %s (owner %s, uid %d; mode %s)" % (prefix, why, owner, info.st_uid, stat.filemode(info.st_mode))
        return text if prefix == path else text + ", on the path of " + path
    return None


def is_dir(path):
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def exists_or_link(path):
    try:
        os.lstat(path)
        return True
    except OSError:
        return False


def holder_names(folder):
    """The lock folder's holder files, in the shell glob's order; none when it cannot be read."""
    try:
        return sorted(name for name in os.listdir(folder) if name.startswith("holder."))
    except OSError:
        return []


def root_owned_folder(path):
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid == 0


def lock_folder(bases, root_lock, uid, environ):
    """(folder, None) for the run lock ("" for none: unlocked), or ("", why) when the folder it must use is not
    safe. ``$NVDEPLOY_LOCK_DIR`` when set. Else the system lock folder's ``nvdeploy`` (the first of ``bases`` that is
    a real folder) when it is there for us: made by root (root's own, or one an admin made for a group) or by this
    user. Root never uses one another user made: ``/run/lock`` is writable by everyone, so anyone could make it
    before root's first run and stop every run; root's lock is then ``root_lock`` (``/run/nvdeploy``, where only
    root can make it). A user who is not root takes it only where root may not, then ``$XDG_RUNTIME_DIR``."""
    folder = environ.get("NVDEPLOY_LOCK_DIR", "")
    if folder:
        return folder, None
    base = next((b for b in bases if is_dir(b)), "")
    mine = base + "/nvdeploy"
    root_own = uid == 0 and bool(root_lock) and is_dir(root_lock.rsplit("/", 1)[0] or "/")
    if base and exists_or_link(mine) and not (root_own and not root_owned_folder(mine)):
        why = unsafe_folder(mine, uid)
        if why is not None:
            return "", why
        if os.access(mine, os.W_OK | os.X_OK):
            folder = mine
    elif base and not exists_or_link(mine) and not root_own and owned(base, uid):
        folder = mine
    if not folder and root_own:
        folder = root_lock
    if not folder and environ.get("XDG_RUNTIME_DIR"):
        runtime = environ["XDG_RUNTIME_DIR"]
        folder = (runtime[:-1] if runtime.endswith("/") else runtime) + "/nvdeploy"
    return folder, None


def holder_line(path):
    """(first line, None) of a holder file, (None, None) while it has no whole line (or is gone), or (None, why)
    when it is not read at all. In a folder shared with a group, another member can swap a holder for a link to a
    file only root may read, a FIFO that blocks the read, or a hard link: the file is opened without following a
    link or waiting for a writer, and read only when fstat says it is a plain file with one link."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY)
    except FileNotFoundError:
        return None, None
    except OSError:
        return None, "is a symbolic link or cannot be opened"
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None, "is not a plain file"
        if info.st_nlink != 1:
            return None, "has other hard links"
        data = os.read(fd, HOLDER_MAX)
    except OSError:
        return None, "cannot be read"
    finally:
        os.close(fd)
    if b"\n" not in data:
        return None, None
    return data.split(b"\n", 1)[0], None


def owned(path, uid):
    try:
        return os.stat(path).st_uid == uid
    except OSError:
        return False


class Batch:
    def __init__(self, settings):
        self.s = settings
        self.me = os.getpid()
        self.sid = os.getsid(0)
        self.pgid = os.getpgid(0)
        self.uid = os.geteuid()
        self.holder_file = None
        self.lock_fd = None
        self.poller = select.poll()
        self.streams = {}  # fd -> Stream
        self.children = {}  # pid -> index (-1: the sudo check)
        self.status = {}  # index -> exit status as the shell's $? gives it
        self.heard = time.monotonic()
        self.stdin_open = True
        self.pending = b""  # what came on stdin after the password line
        wake_read, wake_write = os.pipe()
        for fd in (wake_read, wake_write):
            os.set_blocking(fd, False)
        self.wake = wake_read
        signal.set_wakeup_fd(wake_write)
        signal.signal(signal.SIGCHLD, lambda number, frame: None)
        self.poller.register(self.wake, select.POLLIN)
        self.poller.register(0, select.POLLIN)
        self.null = os.open(os.devnull, os.O_RDWR)
        self.environ = None

    # ---------------------------------------------------------------- output and the end

    def say(self, data):
        write_all(1, data)

    def sweep(self, number, spare, only_tools):
        """Sends ``number`` (0: just count) to every live process of our session but ``spare`` and, with
        ``only_tools``, but our own process group; how many were signalled."""
        if not self.s.ours:
            return 0
        hit = 0
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            pid = int(name)
            if pid in spare:
                continue
            try:
                if os.getsid(pid) != self.sid or (only_tools and os.getpgid(pid) == self.pgid):
                    continue
                with open("/proc/%d/stat" % pid, "rb") as handle:
                    line = handle.read()
            except OSError:  # gone, or not ours to ask about
                continue
            fields = line[line.rfind(b")") + 2:].split()
            if not fields or fields[0] in (b"Z", b"X") or int(fields[3]) != self.sid:
                continue
            try:
                os.kill(pid, number)
                hit += 1
            except OSError:
                pass
        return hit

    def end_session(self, spare, only_tools, pump):
        """TERM to what is left of the session; when anything got it, up to the grace for it to go, then KILL."""
        if not self.sweep(signal.SIGTERM, spare, only_tools):
            return
        for _ in range(self.s.grace_ticks):
            if pump:
                self.pump(0.1)
            else:
                time.sleep(0.1)
            if not self.sweep(0, spare, only_tools):
                return
        self.sweep(signal.SIGKILL, spare, only_tools)

    def release(self):
        if self.holder_file is not None:
            try:
                os.unlink(self.holder_file)
            except OSError:
                pass
            self.holder_file = None
        if self.lock_fd is not None:
            os.close(self.lock_fd)
            self.lock_fd = None

    def ended(self):
        """The watcher's end: stdin closed or silent. Everything of the session goes, but this process and the
        script's shell that waits for it."""
        self.end_session({self.me, os.getppid()}, False, False)
        self.release()

    # ---------------------------------------------------------------- the loop

    def pump(self, timeout):
        """One round of the loop: stdin, the streams, finished children. Raises Ended when stdin ended."""
        if self.s.period > 0:
            silence = self.heard + 2 * self.s.period - time.monotonic()
            if silence <= 0:
                raise Ended()
            timeout = silence if timeout is None else min(timeout, silence)
        for fd, _events in self.poller.poll(None if timeout is None else max(0, int(timeout * 1000) + 1)):
            if fd == self.wake:
                try:
                    while os.read(self.wake, 4096):
                        pass
                except OSError:
                    pass
                continue
            try:
                data = os.read(fd, READ_SIZE)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if fd == 0:
                if not data:
                    raise Ended()
                self.heard = time.monotonic()
                continue
            if data:
                self.streams[fd].take(data)
                continue
            self.poller.unregister(fd)
            os.close(fd)
            del self.streams[fd]
        self.reap()

    def reap(self):
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            index = self.children.pop(pid, None)
            if index is None:
                continue
            self.status[index] = 128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)

    def pump_until(self, done):
        while not done():
            self.pump(None)

    # ---------------------------------------------------------------- starting a command

    def stream(self, cap, tail):
        read_end, write_end = os.pipe()
        os.set_blocking(read_end, False)
        kept = Stream(cap, tail)
        self.streams[read_end] = kept
        self.poller.register(read_end, select.POLLIN)
        return kept, write_end

    def start(self, index, argv, stdin_fd, out_fd, err_fd):
        if hasattr(os, "posix_spawnp"):  # 3.8+: no copy of this process's memory for the exec
            if self.environ is None:  # once: os.environ decodes and posix_spawn encodes every variable per call
                self.environ = dict(os.environb)
            pid = os.posix_spawnp(argv[0], argv, self.environ, file_actions=[
                (os.POSIX_SPAWN_DUP2, stdin_fd, 0), (os.POSIX_SPAWN_DUP2, out_fd, 1),
                (os.POSIX_SPAWN_DUP2, err_fd, 2)], setsigdef=CHILD_DEFAULTS)
        else:
            pid = os.fork()
            if pid == 0:
                try:
                    os.dup2(stdin_fd, 0)
                    os.dup2(out_fd, 1)
                    os.dup2(err_fd, 2)
                    for number in CHILD_DEFAULTS:
                        signal.signal(number, signal.SIG_DFL)
                    os.execvp(argv[0], argv)
                finally:
                    os._exit(127)
        self.children[pid] = index
        return pid

    def password_stdin(self, password):
        read_end, write_end = os.pipe()
        write_all(write_end, password + b"\n")  # a here-document's worth: a password fits the pipe's buffer
        os.close(write_end)
        return read_end

    # ---------------------------------------------------------------- the batch

    def read_password(self):
        line = bytearray()
        while True:
            data = os.read(0, READ_SIZE)
            if not data:  # EOF before a whole line: the shell's read fails, and the password is empty
                self.stdin_open = False
                return b""
            line += data
            if b"\n" in line:
                password, self.pending = bytes(line).split(b"\n", 1)
                return password

    def take_lock(self):
        """True to go on; False when the batch was refused (its lines printed)."""
        folder, why = lock_folder(self.s.lock_bases, self.s.root_lock, self.uid, os.environ)
        if why is not None:
            return self.refuse("run lock folder", why)
        if not folder:
            return True
        if folder != "/" and folder.endswith("/"):
            folder = folder[:-1]
        if not exists_or_link(folder):
            try:
                os.mkdir(folder, 0o700)
            except OSError:
                pass
        why = unsafe_folder(folder, self.uid)
        if why is not None:
            return self.refuse("run lock folder", why)
        try:
            fd = os.open(folder, os.O_RDONLY)
        except OSError:
            return True  # as the shell's "command exec 9<": a folder it cannot open is not locked
        import fcntl
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return self.busy(folder)
        # Inherited by every tool: one that outlives the batch keeps the node busy, as in the shell batch, where
        # it is fd 9 too.
        if fd != 9:
            try:
                os.fstat(9)
            except OSError:  # free
                os.dup2(fd, 9)
                os.close(fd)
                fd = 9
        os.set_inheritable(fd, True)
        self.lock_fd = fd
        for name in holder_names(folder):
            path = folder + "/" + name
            pid = name[len("holder."):].split(".", 1)[0]
            try:
                info = os.lstat(path)
            except OSError:
                continue
            if stat.S_ISREG(info.st_mode) and not os.path.isdir("/proc/" + pid) and (
                    info.st_uid == self.uid or self.uid == 0):
                try:
                    os.unlink(path)
                except OSError:
                    pass
        user = os.environ.get("USER") or os.environ.get("LOGNAME")
        if not user:
            try:
                import pwd
                user = pwd.getpwuid(self.uid).pw_name
            except (ImportError, KeyError):
                user = str(self.uid)
        line = "user=%s run=%s pid=%d since=%s\n" % (user, self.s.run_id, self.me,
                                                     time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        for _ in range(100):  # a fresh name, made with O_EXCL in the checked folder: never one someone planted
            path = "%s/holder.%d.%s" % (folder, self.me, os.urandom(5).hex())
            try:
                holder = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            except FileExistsError:
                continue
            except OSError:
                break
            self.holder_file = path
            try:
                os.write(holder, line.encode())  # one line in one write: a busy reader takes only a whole line
                if not owned(folder, self.uid):
                    os.fchmod(holder, 0o644)  # a folder shared with a group: the others' busy message reads it
            except OSError:
                pass
            os.close(holder)
            break
        return True

    def busy(self, folder):
        info = ""
        for _ in range(21):
            live = False
            for name in holder_names(folder):
                pid = name[len("holder."):].split(".", 1)[0]
                if not os.path.isdir("/proc/" + pid):
                    continue
                live = True
                first, why = holder_line(folder + "/" + name)
                if why is not None:
                    info = "holder unreadable (%s %s, not read)" % (name, why)
                    break
                if first is not None:
                    info = first.decode("utf-8", "replace")
                    break
            # The holder makes its file and then writes its line: a live holder's file without a whole line is
            # being written, so it is read again shortly (2 s at most) rather than named "unknown".
            if info or not live:
                break
            time.sleep(0.1)
        self.say(BUSY_MARKER + b" " + (info or "holder unknown (no holder info in %s)" % folder).encode() + b"\n"
                 + END_MARKER + b"\n")
        return False

    def refuse(self, what, why):
        self.say(UNSAFE_MARKER + (" %s: %s\n" % (what, why)).encode() + END_MARKER + b"\n")
        return False

    def sudo_check(self, password):
        """The one password attempt, alone, before any sudo command: its exit status and stderr, printed early."""
        errors, write_end = self.stream(SUDO_STDERR_MAX, False)
        stdin_fd = self.password_stdin(password)
        self.start(-1, self.s.sudo_check, stdin_fd, self.null, write_end)
        os.close(stdin_fd)
        os.close(write_end)
        self.pump_until(lambda: -1 in self.status and errors not in self.streams.values())
        rc, answer = self.status[-1], errors.result()
        line = answer[:SUDO_LINE_MAX]
        self.say(b"__NVD_SUDO__ rc=%d err=%d\n" % (rc, len(line)) + line)
        return rc, answer

    def run(self):
        password = self.read_password() if self.s.password else b""
        if self.pending:
            self.heard = time.monotonic()
        if self.s.lock and not self.take_lock():
            return
        if not self.stdin_open:
            raise Ended()
        checked = None
        if self.s.sudo_check:
            checked = self.sudo_check(password)
        frames = []
        for index, (cap, flags, argv) in enumerate(self.s.commands):
            out, out_w = self.stream(cap, "t" in flags)
            err, err_w = self.stream(cap, False)
            frames.append((out, err))
            if "g" in flags and checked is not None and checked[0] != 0:
                # Not run: the check failed. Its stderr is sudo's answer to that check.
                self.status[index] = "s%d" % checked[0]
                if checked[1]:  # at most a pipe's buffer: the write cannot block
                    os.write(err_w, checked[1][:SUDO_STDERR_MAX])
            else:
                stdin_fd = self.password_stdin(password) if "p" in flags else self.null
                self.start(index, argv, stdin_fd, out_w, err_w)
                if stdin_fd != self.null:
                    os.close(stdin_fd)
            os.close(out_w)
            os.close(err_w)
        self.say(STARTED_MARKER + b"\n")
        self.pump_until(lambda: not self.children)
        self.say(RAN_MARKER + b"\n")
        # End what the tools left (outside our own process group), so their pipes close, then drain them.
        self.end_session({self.me, os.getppid(), self.s.spare_parent}, True, True)
        self.pump_until(lambda: not self.streams)
        parts = []
        for index, (out, err) in enumerate(frames):
            kept_out, kept_err = out.result(), err.result()
            parts.append(b"__NVD_CMD %d rc=%s out=%d/%d err=%d/%d__\n" % (
                index, str(self.status.get(index, "x")).encode(), len(kept_out), out.total, len(kept_err),
                err.total))
            parts += [kept_out, kept_err]
        self.say(b"".join(parts))
        # The controller may send this node its next batch the moment the end marker arrives: the lock is free
        # and the holder file gone by then.
        self.release()
        self.say(END_MARKER + b"\n")


def main(words):
    if sys.version_info < (3, 6):
        return 3
    batch = None
    try:
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        batch = Batch(Settings(words))
        batch.run()
        return 0
    except Ended:
        batch.ended()
        return 0
    except BaseException:  # noqa: BLE001 - anything else: no end marker, so every command is ERROR
        if batch is not None:
            try:  # nothing it started outlives it
                batch.ended()
            except BaseException:  # noqa: BLE001
                pass
        return 90


if __name__ == "__main__":
    os._exit(main(sys.argv[1:]))
