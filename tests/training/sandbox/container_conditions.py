"""Run a command under the conditions of a default Docker container, for the sandbox's fail-closed tests.

    python container_conditions.py [--uid N] -- COMMAND...

Installs the part of Docker's default seccomp profile that matters to the sandbox (without CAP_SYS_ADMIN,
`unshare`, `setns`, `mount` and a `clone` with namespace flags fail with EPERM, `clone3` with ENOSYS so that
the C library falls back to `clone`), optionally drops to uid/gid N first (a non-root container user), then
execs COMMAND. Standard library only (ctypes): any Python 3 runs it, as root.
"""
from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct
import sys

# syscall numbers: x86_64 and aarch64 (the hosts we run on)
SYSCALLS = {
    "x86_64": {"arch": 0xC000003E, "unshare": 272, "setns": 308, "mount": 165, "clone": 56, "clone3": 435},
    "aarch64": {"arch": 0xC00000B7, "unshare": 97, "setns": 268, "mount": 40, "clone": 220, "clone3": 435},
}
CLONE_NAMESPACE_FLAGS = 0x7E020000  # NEWNS|NEWCGROUP|NEWUTS|NEWIPC|NEWUSER|NEWPID|NEWNET, as Docker's profile
_LD_W_ABS, _JEQ_K, _JSET_K, _RET_K = 0x20, 0x15, 0x45, 0x06
_ALLOW, _ERRNO, _KILL = 0x7FFF0000, 0x00050000, 0x00000000


def _insn(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("HBBI", code, jt, jf, k)


def filter_program(machine: str) -> bytes:
    nr = SYSCALLS[machine]
    prog = [
        _insn(_LD_W_ABS, 0, 0, 4),                      # seccomp_data.arch
        _insn(_JEQ_K, 1, 0, nr["arch"]),
        _insn(_RET_K, 0, 0, _KILL),                     # another ABI: refuse outright
        _insn(_LD_W_ABS, 0, 0, 0),                      # seccomp_data.nr
        _insn(_JEQ_K, 6, 0, nr["unshare"]),             # -> EPERM
        _insn(_JEQ_K, 5, 0, nr["setns"]),
        _insn(_JEQ_K, 4, 0, nr["mount"]),
        _insn(_JEQ_K, 5, 0, nr["clone3"]),              # -> ENOSYS
        _insn(_JEQ_K, 0, 3, nr["clone"]),               # not clone -> allow
        _insn(_LD_W_ABS, 0, 0, 16),                     # clone's flags (args[0], low 32 bits)
        _insn(_JSET_K, 0, 1, CLONE_NAMESPACE_FLAGS),
        _insn(_RET_K, 0, 0, _ERRNO | errno.EPERM),
        _insn(_RET_K, 0, 0, _ALLOW),
        _insn(_RET_K, 0, 0, _ERRNO | errno.ENOSYS),
    ]
    return b"".join(prog)  # jt/jf count the instructions skipped: 4 + 6 + 1 = 11 (EPERM), 7 + 5 + 1 = 13 (ENOSYS)


def install(machine: str | None = None) -> None:
    program = filter_program(machine or platform.machine())
    buf = ctypes.create_string_buffer(program, len(program))

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = SockFprog(len(program) // 8, ctypes.addressof(buf))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        raise OSError(ctypes.get_errno(), "PR_SET_NO_NEW_PRIVS")
    if libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) != 0:  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
        raise OSError(ctypes.get_errno(), "PR_SET_SECCOMP")


def main(argv: list[str]) -> None:
    uid = None
    if argv[:1] == ["--uid"]:
        uid, argv = int(argv[1]), argv[2:]
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if uid is not None:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    install()
    os.execvp(argv[0], argv)


if __name__ == "__main__":
    main(sys.argv[1:])
