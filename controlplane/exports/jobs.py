"""Running a Spark job (``spark.jobs.export``, ``spark.jobs.index``) from a Celery worker.

The job is ``python -m <module> --spec FILE``: the spec (``spark.jobs.spec``, JSON with
the store's credentials) is written ``0600`` in a fresh ``0700`` directory under
``<DATA_DIR>/jobs`` and removed with it when the job ends, however it ends. The job
prints its ``JobResult`` as the last stdout line; stdout and stderr go to files in that
directory and only their last ``OUTPUT_TAIL_BYTES`` are read (a job's logs may be
large).

The job never outlives its run: it runs through ``dataplane.lifeline`` on a pipe whose
write end only this process holds, so if the worker dies (SIGKILL included) the job's
process gets SIGTERM; past ``timeout_s`` its whole process group (the JVM included) is
killed. Either way the run fails with a ``JobResult`` saying why; nothing here raises
for a job's failure. A continuous export's job (``run_continuous``) runs until it exits
or its keeper stops it, each run's result handed over as it is printed.

``job_command`` is the one place the command is made (tests put a stand-in job there).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from django.conf import settings

from controlplane.core.private_files import private_dir, write_private
from dataplane import lifeline
from spark.jobs.spec import JobResult

OUTPUT_TAIL_BYTES = 64 * 1024
ERROR_CHARS = 4000
STOP_GRACE_S = 30.0


def job_command(module: str, spec_path: Path) -> list[str]:
    """The command that runs job ``module`` on the spec at ``spec_path``."""
    return [sys.executable, "-m", "dataplane.lifeline", module, "--spec", str(spec_path)]


def run_job(module: str, spec_json: str, *, timeout_s: float) -> JobResult:
    """Run job ``module`` on ``spec_json`` and return what it answered (or a failed
    ``JobResult`` saying why it answered nothing)."""
    with _workdir(spec_json) as (workdir, spec_path):
        with _started(job_command(module, spec_path), workdir) as process:
            code = _wait(process, timeout_s)
        if code is None:
            return _failed(
                f"the job ran past its timeout ({timeout_s:g} s) and was killed", workdir
            )
        return _result(code, workdir)


def run_continuous(
    module: str,
    spec_json: str,
    *,
    interval_s: float,
    on_result: Callable[[JobResult], None],
    keep_going: Callable[[], bool],
    poll_s: float,
) -> int:
    """Run job ``module`` with ``--continuous`` (a run every ``interval_s`` in one
    session) until it exits or ``keep_going()`` turns false (asked every ``poll_s``;
    the job then gets SIGTERM, SIGKILL ``STOP_GRACE_S`` later). Each ``JobResult`` line
    it prints goes to ``on_result`` as it comes. Returns its exit status."""
    with _workdir(spec_json) as (workdir, spec_path):
        command = [
            *job_command(module, spec_path),
            "--continuous",
            "--interval-s",
            f"{interval_s:g}",
        ]
        position = 0
        with _started(command, workdir) as process:
            while True:
                code = _exited(process, poll_s)
                position = _emit(workdir / "stdout", position, on_result)
                if code is not None:
                    return code
                if not keep_going():
                    code = _stop(process)
                    _emit(workdir / "stdout", position, on_result)
                    return code


@contextlib.contextmanager
def _workdir(spec_json: str) -> Iterator[tuple[Path, Path]]:
    """A fresh ``0700`` folder holding the spec (``0600``), removed afterwards."""
    root = private_dir(Path(settings.DATA_DIR).resolve() / "jobs")
    workdir = Path(tempfile.mkdtemp(prefix="job-", dir=root))
    try:
        spec_path = workdir / "spec.json"
        write_private(spec_path, spec_json.encode())
        yield workdir, spec_path
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


@contextlib.contextmanager
def _started(command: list[str], workdir: Path) -> Iterator[subprocess.Popen[bytes]]:
    """The job started on the lifeline (module docstring); killed with its group if the
    ``with`` block is left by an exception (the task itself is being stopped)."""
    read_end, write_end = os.pipe()
    env = {**os.environ, lifeline.ENV: str(read_end)}
    try:
        with open(workdir / "stdout", "wb") as out, open(workdir / "stderr", "wb") as err:
            process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                env=env,
                pass_fds=(read_end,),
                start_new_session=True,  # its own group: a kill takes the JVM too
            )
        os.close(read_end)
        read_end = -1
        try:
            yield process
        except BaseException:
            _kill(process)
            raise
    finally:
        if read_end >= 0:
            os.close(read_end)
        os.close(write_end)


def _wait(process: subprocess.Popen[bytes], timeout_s: float) -> int | None:
    """The exit code, or None after killing the job's group at the timeout."""
    try:
        return process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill(process)
        return None


def _exited(process: subprocess.Popen[bytes], wait_s: float) -> int | None:
    try:
        return process.wait(timeout=wait_s)
    except subprocess.TimeoutExpired:
        return None


def _stop(process: subprocess.Popen[bytes]) -> int:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        return process.wait(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        _kill(process)
        return process.returncode


def _kill(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def _emit(path: Path, position: int, on_result: Callable[[JobResult], None]) -> int:
    """Hand the ``JobResult`` lines written to ``path`` since ``position`` (whole lines,
    at most ``OUTPUT_TAIL_BYTES`` at a time) to ``on_result``; returns the new position.
    Other lines (a job's own output) are skipped."""
    with open(path, "rb") as file:
        file.seek(position)
        data = file.read(OUTPUT_TAIL_BYTES)
    whole = data[: data.rfind(b"\n") + 1]
    if not whole and len(data) == OUTPUT_TAIL_BYTES:
        whole = data  # a line longer than a read is no result: skipped
    for line in whole.decode("utf-8", "replace").splitlines():
        with contextlib.suppress(ValueError, TypeError):
            on_result(JobResult.from_json(line))
    return position + len(whole)


def _result(code: int, workdir: Path) -> JobResult:
    lines = _tail(workdir / "stdout").decode("utf-8", "replace").strip().splitlines()
    if lines:
        with contextlib.suppress(ValueError, TypeError):
            result = JobResult.from_json(lines[-1])
            if code != 0 and result.status == "succeeded":
                return _failed(f"the job exited with status {code}", workdir)
            return result
    return _failed(f"the job exited with status {code} without a result", workdir)


def _failed(why: str, workdir: Path) -> JobResult:
    stderr = _tail(workdir / "stderr").decode("utf-8", "replace").strip()
    detail = f"{why}\n{stderr[-ERROR_CHARS:]}" if stderr else why
    return JobResult(status="failed", error=detail)


def _tail(path: Path) -> bytes:
    with contextlib.suppress(FileNotFoundError), open(path, "rb") as file:
        file.seek(max(0, os.fstat(file.fileno()).st_size - OUTPUT_TAIL_BYTES))
        return file.read()
    return b""
