"""Stop together with the process that started us, however it ends: a lifeline pipe.

A supervisor (``./dev run``) creates a pipe with ``cut_on_exit()``, keeps its write end
and hands the read end to every process it starts, naming the descriptor in
``MERIDIAN_LIFELINE_FD``; a process that starts others for it (the controller's local
provisioner starts brokers) passes the same descriptor on with ``pass_fds()``. Only the
supervisor holds the write end (pipes are close-on-exec), so when it exits for any
reason, SIGKILL included, the kernel closes it and every holder of the read end reads
end-of-file. ``watch()`` waits for that on a daemon thread and sends its own main thread
SIGTERM, the clean stop every Meridian process already handles.

Nothing ever writes to the pipe; without ``MERIDIAN_LIFELINE_FD`` (tests, a broker run by
hand, a service manager) ``watch()`` does nothing.
"""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import threading

ENV = "MERIDIAN_LIFELINE_FD"


def cut_on_exit() -> int:
    """Make the pipe in the supervisor; its read end is also named in this process's
    environment so children inherit the name. Returns the read end (for ``pass_fds``)."""
    read_end, _write_end = os.pipe()  # the write end stays open until this process ends
    os.environ[ENV] = str(read_end)
    return read_end


def inherited_fd() -> int | None:
    """The read end this process was given, if it was given one that is open."""
    value = os.environ.get(ENV, "")
    if not value.isdigit():
        return None
    fd = int(value)
    try:
        is_pipe = stat.S_ISFIFO(os.fstat(fd).st_mode)
    except OSError:
        is_pipe = False
    if not is_pipe:  # the name came without the pipe: never read whatever holds the number
        os.environ.pop(ENV, None)
        return None
    return fd


_own_read_end: int | None = None


def for_children() -> int:
    """The read end to hand a child (``Popen(pass_fds=...)``, named by ``ENV`` in the
    child's environment only): the inherited lifeline, else this process's own, made once
    (its write end held until this process ends), so a launcher without a supervisor
    (``dataplane.local``: the tests, a script) still takes its brokers down with it."""
    global _own_read_end
    fd = inherited_fd()
    if fd is not None:
        return fd
    if _own_read_end is None:
        _own_read_end, _write_end = os.pipe()  # never closed: cut when this process ends
    return _own_read_end


def pass_fds() -> tuple[int, ...]:
    """What to add to ``subprocess.Popen(pass_fds=...)`` so a child inherits the lifeline."""
    fd = inherited_fd()
    return () if fd is None else (fd,)


def watch() -> bool:
    """SIGTERM this process once the supervisor is gone; False when there is none."""
    fd = inherited_fd()
    if fd is None:
        return False
    threading.Thread(target=_wait_for_cut, args=(fd,), name="lifeline", daemon=True).start()
    return True


def _wait_for_cut(fd: int) -> None:
    with contextlib.suppress(OSError):
        while os.read(fd, 1):
            pass  # nobody writes; only end-of-file (or an error) ends the wait
    # To the main thread: its blocking wait (an Event's, a lock's) is interrupted so
    # Python runs the handler; a signal the kernel gave this thread instead would leave
    # the main thread asleep with the handler never run.
    main = threading.main_thread().ident
    if main is None:
        os.kill(os.getpid(), signal.SIGTERM)
    else:
        signal.pthread_kill(main, signal.SIGTERM)


def run_module(argv: list[str]) -> None:
    """``python -m dataplane.lifeline MODULE [ARGS...]``: run ``python -m MODULE ARGS``
    watching the lifeline, for programs that do not call ``watch()`` themselves (the
    demo's API server and Celery worker)."""
    import runpy
    import sys

    if not argv:
        raise SystemExit("usage: python -m dataplane.lifeline MODULE [ARGS...]")
    watch()
    sys.argv = list(argv)
    runpy.run_module(argv[0], run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    import sys

    run_module(sys.argv[1:])
