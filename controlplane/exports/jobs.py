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
for a job's failure.

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
from pathlib import Path

from django.conf import settings

from controlplane.core.private_files import private_dir, write_private
from dataplane import lifeline
from spark.jobs.spec import JobResult

OUTPUT_TAIL_BYTES = 64 * 1024
ERROR_CHARS = 4000


def job_command(module: str, spec_path: Path) -> list[str]:
    """The command that runs job ``module`` on the spec at ``spec_path``."""
    return [sys.executable, "-m", "dataplane.lifeline", module, "--spec", str(spec_path)]


def run_job(module: str, spec_json: str, *, timeout_s: float) -> JobResult:
    """Run job ``module`` on ``spec_json`` and return what it answered (or a failed
    ``JobResult`` saying why it answered nothing)."""
    root = private_dir(Path(settings.DATA_DIR).resolve() / "jobs")
    workdir = Path(tempfile.mkdtemp(prefix="job-", dir=root))  # 0700
    try:
        spec_path = workdir / "spec.json"
        write_private(spec_path, spec_json.encode())
        return _launch(job_command(module, spec_path), workdir, timeout_s)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _launch(command: list[str], workdir: Path, timeout_s: float) -> JobResult:
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
                start_new_session=True,  # its own group: a timeout kills the JVM too
            )
            os.close(read_end)
            read_end = -1
            code = _wait(process, timeout_s)
    finally:
        if read_end >= 0:
            os.close(read_end)
        os.close(write_end)
    if code is None:
        return _failed(f"the job ran past its timeout ({timeout_s:g} s) and was killed", workdir)
    return _result(code, workdir)


def _wait(process: subprocess.Popen[bytes], timeout_s: float) -> int | None:
    """The exit code, or None after killing the job's group at the timeout."""
    try:
        return process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        return None
    except BaseException:  # the task itself is being stopped: the job goes with it
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        raise


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
