"""Executors: where a sweep's trials run. Each trial is one ``aah-viz`` process (train, retrofit or frontier),
so a worker that dies (killed, out of memory, a node lost) takes only its own trial with it; the next
``aah-viz sweep`` resumes it.

- ``local``: N worker threads on this machine, each running one subprocess with its thread budget;
- ``ray``: each trial a Ray task with its CPU/GPU request, on a cluster (``address``) or a local runtime;
- ``slurm``: Slurm job arrays through submitit (``cluster="local"``: submitit's local executor).

Every executor reports through ``on_event(kind, trial, code)``: ``start`` (code None) then ``end`` with the
trial's exit code (a negative code: killed by that signal; None: lost without one). Ray and submitit are
imported only inside their executor: nothing else of the light side needs them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from aah_viz.errors import MissingDependencyError

EXECUTORS = ("local", "ray", "slurm")
POLL_S = 1.0


def trial_command(argv: Sequence[str]) -> list[str]:
    return [sys.executable, "-m", "aah_viz", *argv]


def trial_env(threads: int | None) -> dict[str, str]:
    """This process's environment with the trial's thread budget and this copy of the package first on the path."""
    env = dict(os.environ)
    if threads:
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
            env[var] = str(threads)
    root = str(Path(__file__).resolve().parents[2])  # the folder holding aah_viz: the same code in every trial
    env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [env.get("PYTHONPATH")])])
    return env


def start_trial(argv: Sequence[str], log_path: str, threads: int | None = None) -> subprocess.Popen:
    """Start one trial; its console output goes to ``log_path`` (appended, after the command line)."""
    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "a", encoding="utf-8") as log:
        log.write(f"$ aah-viz {' '.join(argv)}\n")
        log.flush()
        return subprocess.Popen(trial_command(argv), stdout=log, stderr=subprocess.STDOUT, env=trial_env(threads))


def run_trial(argv: Sequence[str], log_path: str, threads: int | None = None) -> int:
    """Run one trial to its end. Returns the exit code. A plain function of plain arguments: Ray and submitit
    ship it to their workers as it is."""
    return start_trial(argv, log_path, threads).wait()


class LocalTrials:
    """The local trials' processes and whether the sweep is stopping, under one lock: a trial starting in the
    instant of a stop either never starts or is among the processes the stop signals."""

    def __init__(self) -> None:
        self._lock = threading.RLock()  # reentrant: the signal handler may interrupt the main thread holding it
        self._procs: set[subprocess.Popen] = set()
        self.stopping = False

    def start(self, launch: Callable[[], subprocess.Popen]) -> subprocess.Popen | None:
        """``launch()``'s process, or None once the sweep is stopping (the next sweep call runs the trial)."""
        with self._lock:
            if self.stopping:
                return None
            proc = launch()
            self._procs.add(proc)
            return proc

    def wait(self, proc: subprocess.Popen) -> int:
        try:
            return proc.wait()
        finally:
            with self._lock:
                self._procs.discard(proc)

    def stop(self, signum=None, frame=None) -> None:
        """Start no further trial; SIGTERM to the running ones (they stop after their step and close their runs)."""
        with self._lock:
            self.stopping = True
            for proc in self._procs:
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)


OnEvent = Callable[[str, object, "int | None"], None]


def run_local(trials, *, workers: int, threads: int | None, on_event: OnEvent) -> None:
    """The trials on ``workers`` threads. A SIGTERM or SIGHUP to the sweep (or Ctrl+C in its thread) starts no
    further trial and passes SIGTERM to the running ones, which stop after their step as a kill of each would;
    it returns once they have closed their runs (the next ``aah-viz sweep`` resumes them)."""
    running = LocalTrials()

    def one(trial):
        try:
            proc = running.start(lambda: start_trial(trial.argv, str(trial.log_path), threads))
        except OSError:
            on_event("start", trial, None)
            on_event("end", trial, None)
            return
        if proc is None:
            return  # never started: the next sweep call runs it
        on_event("start", trial, None)
        on_event("end", trial, running.wait(proc))

    in_main = threading.current_thread() is threading.main_thread()
    signals = (signal.SIGTERM, signal.SIGHUP)
    previous = {sig: signal.signal(sig, running.stop) for sig in signals} if in_main else {}
    try:
        with ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="sweep-worker") as pool:
            futures = [pool.submit(one, t) for t in trials]
            try:
                for future in futures:
                    future.result()
            except BaseException:
                running.stop()  # the pool's exit waits for the running trials to close their runs
                raise
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def run_ray(trials, *, workers: int, threads: int | None, gpus: float, address: str | None, on_event: OnEvent) -> None:
    try:
        import ray
    except ModuleNotFoundError:
        raise MissingDependencyError(
            "--executor ray needs Ray: pip install 'aah-viz[sweep]' (or pip install ray)"
        ) from None
    cpus = threads or 1
    started_here = not ray.is_initialized()
    if started_here:
        options = {"address": address} if address else {"num_cpus": max(1, workers) * cpus, "include_dashboard": False}
        ray.init(**options, log_to_driver=False, configure_logging=False)
    try:
        remote = ray.remote(num_cpus=cpus, num_gpus=gpus, max_retries=0)(run_trial)
        pending = {}
        for trial in trials:
            pending[remote.remote(list(trial.argv), str(trial.log_path), threads)] = trial
            on_event("start", trial, None)
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=None)
            for ref in ready:
                trial = pending.pop(ref)
                try:
                    code = ray.get(ref)
                except Exception:  # the task's worker died: only this trial is lost
                    code = None
                on_event("end", trial, code)
    finally:
        if started_here:
            ray.shutdown()


def run_slurm(
    trials,
    *,
    workers: int,
    threads: int | None,
    gpus: int,
    folder: Path,
    cluster: str | None,
    partition: str | None,
    timeout_min: int,
    on_event: OnEvent,
) -> None:
    """One job array per wave: on Slurm a single array (``workers`` tasks at a time); with submitit's local
    executor, which starts every job of an array at once, arrays of ``workers`` trials one after another."""
    try:
        import submitit
    except ModuleNotFoundError:
        raise MissingDependencyError(
            "--executor slurm needs submitit: pip install 'aah-viz[sweep]' (or pip install submitit)"
        ) from None
    executor = submitit.AutoExecutor(folder=str(folder), cluster=cluster)
    params = {"timeout_min": timeout_min, "cpus_per_task": threads or 1, "slurm_array_parallelism": max(1, workers)}
    if gpus:
        params["gpus_per_node"] = gpus
    if partition:
        params["slurm_partition"] = partition
    executor.update_parameters(**params)
    trials = list(trials)
    wave = len(trials) if executor.cluster == "slurm" else max(1, workers)
    for i in range(0, len(trials), wave):
        batch = trials[i : i + wave]
        jobs = executor.map_array(
            run_trial, [list(t.argv) for t in batch], [str(t.log_path) for t in batch], [threads] * len(batch)
        )
        for trial in batch:
            on_event("start", trial, None)
        pending = dict(zip(jobs, batch))
        while pending:
            for job in [j for j in pending if j.done()]:
                trial = pending.pop(job)
                try:
                    code = job.result()
                except Exception:  # the job failed or its process was killed: this trial only
                    code = None
                on_event("end", trial, code)
            if pending:
                time.sleep(POLL_S)
