"""A fork server for tests that run many ``fedaudit`` commands from a shell script (the README's blocks).

Each command would otherwise pay the interpreter's and torch's import (about 3 s on a 2-core CPU, more under
xdist). The server imports the CLI once, then forks one child per command; the child takes the caller's stdin,
stdout and stderr (passed over a Unix socket), working directory, environment and argv, runs the console entry point
as the installed script would, and its exit status goes back to the caller. The script still sees a command named
``fedaudit`` with the same words, streams and exit codes: ``client`` is that command.

    python -m tests.forkserver serve SOCKET    # the server (the test starts it)
    python -m tests.forkserver client SOCKET ARGS...
"""

from __future__ import annotations

import array
import json
import os
import signal
import socket
import sys

_MAX = 1 << 20


def _recv_all(conn: socket.socket) -> tuple[bytes, list[int]]:
    msg, fds, _, _ = socket.recv_fds(conn, _MAX, 3)
    return msg, list(fds)


def _child(request: dict, fds: list[int]) -> int:
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = ["fedaudit", *request["argv"]]
    from fedaudit.cli.entry import main

    try:
        main()
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    return code


def serve(path: str) -> None:
    # Imports only: a tensor operation here would start OpenMP's thread pool, which a forked child cannot use.
    import lpips  # noqa: F401

    import fedaudit.cli.app  # noqa: F401 - the heavy imports, paid once
    import fedaudit.jobs  # noqa: F401

    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(8)
    while True:
        conn, _ = server.accept()
        msg, fds = _recv_all(conn)
        if msg == b"stop":
            conn.close()
            return
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            server.close()
            code = 1
            try:
                code = _child(json.loads(msg), fds)
            finally:
                os._exit(code)
        for fd in fds:
            os.close(fd)
        _, status = os.waitpid(pid, 0)
        conn.sendall(str(os.waitstatus_to_exitcode(status)).encode())
        conn.close()


def client(path: str, argv: list[str]) -> int:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(path)
    request = json.dumps({"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ)}).encode()
    socket.send_fds(conn, [request], array.array("i", [0, 1, 2]))
    reply = b""
    while chunk := conn.recv(64):
        reply += chunk
    code = int(reply)
    return 128 - code if code < 0 else code  # killed by a signal: the shell's 128 + N


def stop(path: str) -> None:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(path)
    conn.sendall(b"stop")
    conn.close()


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(sys.argv[2])
    else:
        raise SystemExit(client(sys.argv[2], sys.argv[3:]))
