"""The operating-system jail: bubblewrap namespaces, an unprivileged host uid and a seccomp filter.

Inside, the worker sees a read-only ``/usr`` and Python's own install, a fresh ``/proc`` and a
read-only minimal ``/dev``, on a read-only root; a 64 MiB private tmpfs at ``/tmp`` is the only
writable place. It has its own PID, network (loopback only), IPC, UTS and cgroup namespaces, no
environment beyond PATH/HOME/LANG, and dies with its parent.

The candidate never runs as host uid 0: uid 0 alone may write kernel settings under ``/proc/sys``
and ignores process limits, capabilities or not. Started by root, bwrap makes no user namespace
(it would map the jail's uid 0 to the host's) and keeps only CAP_SETUID/CAP_SETGID/CAP_SETPCAP,
which the worker's first trusted lines spend to empty the bounding set and become a uid of its own
(``jail_uid``), then to empty the inheritable set: no capability is left in any set. Started by
another user, bwrap maps that (unprivileged) user into a user namespace that cannot nest, and runs
the program as PID 1, with no init of bwrap's beside it that would share its uid. Either way
``no_new_privs`` is set. The seccomp filter, built from an allow-list where it matters:

- new processes: fork, vfork and process-creating clone fail (threads stay allowed, and are capped
  by RLIMIT_NPROC under the unprivileged uid); clone3 answers ENOSYS so libc falls back to clone;
- sockets: only AF_UNIX; every other family (inet, vsock, packet, netlink, crypto, ...) fails.
  The network namespace is empty anyway, and TCP's autotuning grows each socket's buffers to
  megabytes of kernel memory the address-space limit does not count;
- memory the address-space limit does not count: memfd and SysV shared memory fail (POSIX shared
  memory needs a writable ``/dev/shm``, which is read-only; ``/tmp`` is capped; POSIX message
  queues get RLIMIT_MSGQUEUE 0, set with the other limits); socket buffers
  cannot be enlarged (SO_SNDBUF, SO_RCVBUF), so with the worker's few descriptors they stay small;
  fallocate fails: it reserves space past RLIMIT_FSIZE;
- kernel surface no answer needs: new namespaces, mounts, ptrace and cross-process memory, io_uring,
  bpf, perf events, userfaultfd, the keyring;
- foreign ABIs (x32, 32-bit) are killed: their syscall numbers differ.
"""

from __future__ import annotations

import fcntl
import os
import platform
import pwd
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

from bench.errors import BenchError
from bench.sandbox.base import reap

GUARD_HINT = "or pass --sandbox guard to accept the weaker in-process guard"
INSTALL_HINT = f"install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap), {GUARD_HINT}"
TMPFS_BYTES = 64 * 1024**2
# Host uids for the jails, less those the host's passwd names (so they own no file and run no
# process outside the jails): below 65536, which a container's user namespace maps too.
JAIL_UIDS = range(62_000, 65_000)

AF_UNIX = 1
SOL_SOCKET, SO_SNDBUF, SO_RCVBUF = 1, 7, 8
_CLONE_THREAD = 0x00010000
_RET_ALLOW, _RET_KILL = 0x7FFF0000, 0x80000000
_RET_EPERM, _RET_ENOSYS = 0x00050000 | 1, 0x00050000 | 38
_DENIED = (
    "fork vfork memfd_create memfd_secret shmget io_uring_setup bpf perf_event_open userfaultfd "
    "keyctl add_key request_key ptrace process_vm_readv process_vm_writev unshare setns mount "
    "open_tree move_mount fsopen pidfd_getfd fallocate"
).split()
# struct seccomp_data: nr at 0, arch at 4, args[i] (low half, little-endian) at 16 + 8 * i.
_ARCHES = {  # audit arch, lowest x32 syscall or None, syscall numbers
    "x86_64": (
        0xC000003E,
        0x40000000,
        dict(
            fork=57, vfork=58, clone=56, clone3=435, socket=41, socketpair=53, memfd_create=319,
            memfd_secret=447, shmget=29, io_uring_setup=425, bpf=321, perf_event_open=298,
            userfaultfd=323, keyctl=250, add_key=248, request_key=249, ptrace=101,
            process_vm_readv=310, process_vm_writev=311, unshare=272, setns=308, mount=165,
            open_tree=428, move_mount=429, fsopen=430, pidfd_getfd=438, setsockopt=54, fallocate=285,
        ),
    ),
    "aarch64": (
        0xC00000B7,
        None,
        dict(
            clone=220, clone3=435, socket=198, socketpair=199, memfd_create=279, memfd_secret=447,
            shmget=194, io_uring_setup=425, bpf=280, perf_event_open=241, userfaultfd=282,
            keyctl=219, add_key=217, request_key=218, ptrace=117, process_vm_readv=270,
            process_vm_writev=271, unshare=97, setns=268, mount=40, open_tree=428, move_mount=429,
            fsopen=430, pidfd_getfd=438, setsockopt=208, fallocate=47,
        ),
    ),
}  # fmt: skip

_LD, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06


def _assemble(program: list[tuple]) -> bytes:
    """Classic BPF from (op, k, true-label, false-label) and ("label", name) entries: jumps are
    forward offsets, resolved here so the filter reads as a list of rules."""
    code = [p for p in program if p[0] != "label"]
    where, n = {}, 0
    for p in program:
        if p[0] == "label":
            where[p[1]] = n
        else:
            n += 1
    out, i = [], 0
    for p in code:
        op, k, jt, jf = (*p, None, None)[:4]
        off = lambda label: 0 if label is None else where[label] - i - 1  # noqa: E731
        assert all(0 <= off(t) < 256 for t in (jt, jf)), "BPF jumps go forward, at most 255"
        out.append(struct.pack("=HBBI", op, off(jt), off(jf), k))
        i += 1
    return b"".join(out)


def seccomp_filter(machine: str) -> bytes:
    """The BPF program for ``bwrap --seccomp`` (see the module docstring for what it allows)."""
    if machine not in _ARCHES:
        raise BenchError(f"the bwrap sandbox has no seccomp filter for {machine}; {GUARD_HINT}")
    arch, x32, nr = _ARCHES[machine]
    program: list[tuple] = [(_LD, 4), (_JEQ, arch, "nr", "kill"), ("label", "nr"), (_LD, 0)]
    if x32 is not None:
        program += [(_JGE, x32, "kill", "next"), ("label", "next")]
    rules = {nr["clone3"]: "enosys", nr["clone"]: "clone", nr["setsockopt"]: "setsockopt"}
    rules |= {nr["socket"]: "socket", nr["socketpair"]: "socket"}
    rules |= {nr[name]: "eperm" for name in _DENIED if name in nr}
    for i, (number, label) in enumerate(rules.items()):
        program += [(_JEQ, number, label, f"r{i}"), ("label", f"r{i}")]
    program += [(_RET, _RET_ALLOW)]  # no rule matched
    program += [("label", "clone"), (_LD, 16), (_JSET, _CLONE_THREAD, "allow", "eperm")]
    program += [("label", "socket"), (_LD, 16), (_JEQ, AF_UNIX, "allow", "eperm")]
    program += [("label", "setsockopt"), (_LD, 24), (_JEQ, SOL_SOCKET, "optname", "allow")]
    program += [("label", "optname"), (_LD, 32), (_JEQ, SO_SNDBUF, "eperm", "o1"), ("label", "o1")]
    program += [(_JEQ, SO_RCVBUF, "eperm", "allow")]
    program += [("label", "allow"), (_RET, _RET_ALLOW), ("label", "kill"), (_RET, _RET_KILL)]
    program += [("label", "eperm"), (_RET, _RET_EPERM), ("label", "enosys"), (_RET, _RET_ENOSYS)]
    return _assemble(program)


_uids_in_use: set[int] = set()
_uids_lock = threading.Lock()


@contextmanager
def jail_uid() -> Iterator[int]:
    """A host uid (and gid) that no other running jail holds. RLIMIT_NPROC and the inotify quota
    count per uid across the whole host, so jails sharing one uid could starve each other's
    threads: examples scored at the same time would then fail for their neighbours' sake."""
    with _uids_lock:
        claimed = None
        for u in JAIL_UIDS:
            if u in _uids_in_use or u in _named_uids():
                continue
            claimed = _claim(u)
            if claimed is not None:
                uid = u
                break
        if claimed is None:
            raise BenchError(f"more than {len(JAIL_UIDS)} jails at once; score fewer examples in parallel")
        _uids_in_use.add(uid)
    try:
        yield uid
    finally:
        with _uids_lock:
            _uids_in_use.discard(uid)
            os.close(claimed)


def _claims_dir() -> str:
    """Root's jails claim uids in /run; a user's (who cannot write there) in a folder of their own."""
    if os.geteuid() == 0:
        return "/run/diversed-bench-jail-uids"
    return os.path.join(tempfile.gettempdir(), f"diversed-bench-jail-uids-{os.geteuid()}")


def _claim(uid: int) -> int | None:
    """Another process's jails (an xdist worker, a shard job or torchrun rank beside this one) hold
    their uids by an exclusive lock on a file named after the uid; the kernel drops it when its
    holder dies."""
    claims = _claims_dir()
    os.makedirs(claims, mode=0o700, exist_ok=True)
    fd = os.open(os.path.join(claims, str(uid)), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


@lru_cache(maxsize=1)
def _named_uids() -> frozenset[int]:
    return frozenset(user.pw_uid for user in pwd.getpwall())


def drop_privileges_source(uid: int) -> str:
    """The worker's first lines when bwrap was started by root: become ``uid`` before any
    candidate code exists, holding no capability in any set. Setting every uid clears the permitted,
    effective and ambient sets; bwrap leaves its capabilities in the inheritable set and a full
    bounding set, which no_new_privs makes inert, but which nothing should rest on alone: the
    bounding set is emptied first (CAP_SETPCAP), the inheritable set last (capset, all zeros)."""
    return (
        "import os\n"
        "if os.getuid() == 0:\n"
        "    import ctypes\n"
        "    libc = ctypes.CDLL(None, use_errno=True)\n"
        "    for cap in range(int(open('/proc/sys/kernel/cap_last_cap').read()) + 1):\n"
        "        if libc.prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP\n"
        "            raise OSError(ctypes.get_errno(), f'PR_CAPBSET_DROP {cap}')\n"
        f"    os.setgroups([]); os.setresgid({uid}, {uid}, {uid})\n"
        f"    os.setresuid({uid}, {uid}, {uid})\n"
        "    # _LINUX_CAPABILITY_VERSION_3, this process; effective, permitted, inheritable (x2): none\n"
        "    if libc.capset((ctypes.c_uint32 * 2)(0x20080522, 0), (ctypes.c_uint32 * 6)()) != 0:\n"
        "        raise OSError(ctypes.get_errno(), 'capset')\n"
        "    caps = [line.split()[1] for line in open('/proc/self/status') if line.startswith('Cap')]\n"
        "    assert len(caps) == 5 and not any(int(c, 16) for c in caps), 'the jail kept a capability'\n"
        "    del ctypes, libc, cap, caps\n"
        "assert 0 not in os.getresuid(), 'the jail runs as host root'\n"
    )


def _system_view() -> list[str]:
    """Read-only binds of the system's /usr and of Python's install, and its top-level links."""
    args = ["--ro-bind", "/usr", "/usr"]
    for top in ("/bin", "/sbin", "/lib", "/lib64", "/lib32"):
        path = Path(top)
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), top]
        elif path.is_dir():
            args += ["--ro-bind", top, top]
    prefix = Path(sys.base_prefix).resolve()
    if not prefix.is_relative_to("/usr"):
        # Its parents open to the jail's uid (bwrap would copy /root's 0700), holding nothing else.
        for parent in reversed(prefix.parents[:-1]):
            args += ["--perms", "0755", "--dir", str(parent)]
        args += ["--ro-bind", str(prefix), str(prefix)]
    return args


class BwrapJail:
    name = "bwrap"

    def __init__(self) -> None:
        self.filter = seccomp_filter(platform.machine())

    def command(self, argv: list[str], seccomp_fd: int) -> list[str]:
        if os.geteuid() == 0:  # no user namespace: it would map the jail's uid 0 to the host's
            isolation = [
                "--unshare-ipc",
                "--unshare-pid",
                "--unshare-net",
                "--unshare-uts",
                "--unshare-cgroup",
            ]
            isolation += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
            isolation += ["--cap-add", "CAP_SETPCAP"]  # to empty the bounding set
        else:
            # The user's own uid runs the jail, so bwrap's init (PID 1, outside the seccomp filter)
            # would be the program's to read and signal: the program is PID 1 itself, alone.
            isolation = [
                "--unshare-all",
                "--unshare-user",
                "--disable-userns",
                "--cap-drop",
                "ALL",
                "--as-pid-1",
            ]
        return [
            _bwrap(),
            *isolation,
            "--die-with-parent",
            "--new-session",
            *_system_view(),
            "--proc", "/proc",
            "--dev", "/dev",
            "--remount-ro", "/dev",
            "--perms", "01777", "--size", str(TMPFS_BYTES), "--tmpfs", "/tmp",
            "--remount-ro", "/",
            "--chdir", "/tmp",
            "--hostname", "sandbox",
            "--clearenv",
            "--setenv", "PATH", "/usr/bin:/bin",
            "--setenv", "HOME", "/tmp",
            "--setenv", "LANG", "C.UTF-8",
            "--seccomp", str(seccomp_fd),
            "--",
            *argv,
        ]  # fmt: skip

    @contextmanager
    def process(self, limits: str, worker: str) -> Iterator[subprocess.Popen]:
        with jail_uid() as uid:
            yield from self._process(uid, limits, worker)

    def _process(self, uid: int, limits: str, worker: str) -> Iterator[subprocess.Popen]:
        argv = [
            os.path.realpath(sys.executable),
            "-I",
            "-S",
            "-c",
            drop_privileges_source(uid) + limits + worker,
        ]
        read, write = os.pipe()
        try:
            os.write(write, self.filter)
            os.close(write)
            proc = subprocess.Popen(
                self.command(argv, read),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                pass_fds=(read,),
                env={},  # bwrap's own process stays in the jail as PID 1: it must hold no secrets
                start_new_session=True,
            )
        finally:
            os.close(read)
        yield from reap(proc)

    def check(self) -> None:
        _probe()


def _bwrap() -> str:
    path = shutil.which("bwrap")
    if path is None:
        raise BenchError(f"generated code is not run: bubblewrap (bwrap) is not installed; {INSTALL_HINT}")
    return path


@lru_cache(maxsize=1)
def _probe() -> None:
    """Once per process: bwrap exists and can build this jail here; else say what to do."""
    _bwrap()
    with BwrapJail().process("", "pass") as proc:
        said = proc.communicate()[1].decode(errors="replace").strip().splitlines()
    if proc.returncode != 0:
        reason = said[-1] if said else f"exit code {proc.returncode}"
        raise BenchError(
            f"generated code is not run: bubblewrap cannot build its jail here ({reason}); "
            f"allow unprivileged user namespaces, {GUARD_HINT}"
        )
