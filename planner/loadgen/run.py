"""Running a load: the worker processes, and the parent that starts, watches and stops them.

The engine clients run inside worker processes started with the ``spawn`` method, so the
caller's event loop and GIL never share a process with the drivers. Each worker reports
over a queue (started, progress, result or error); :class:`BackgroundLoad` runs load while
the caller does something else (a rolling playbook) and :func:`run_load` runs it to the
end. Both return a :class:`planner.loadgen.check.LoadResult`.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import queue
import secrets
import signal
import threading
import time
import traceback
from dataclasses import replace
from typing import Any

from planner.engines import get_engine
from planner.errors import KairosError
from planner.loadgen import envelope
from planner.loadgen.check import LoadResult, aggregate
from planner.loadgen.clients import _CassandraWorker, _Plan, _RedisWorker
from planner.loadgen.config import LoadConfig
from planner.workload import collect

# -------------------------------------------------------------------- worker process
#: Where the drivers' own errors come from: a refused or failed connection, a timeout, an
#: authentication error; what they say is the whole story.
_DRIVER_MODULES = ("cassandra", "redis")


def worker_error(exc: BaseException) -> str:
    """What a worker reports of the error that stopped it: ``Type: message``, with the
    traceback only for an error Kairos did not expect (a bug to report), never for the
    drivers' connection errors or a KairosError, which name their cause themselves."""
    text = f"{type(exc).__name__}: {exc}"
    expected = (isinstance(exc, KairosError | OSError)
                or type(exc).__module__.split(".")[0] in _DRIVER_MODULES)
    return text if expected else f"{text}\n{traceback.format_exc()}"


def _worker_main(config: LoadConfig, index: int, tag: str, stop: Any, schema_ready: Any,
                 messages: Any) -> None:
    """Entry point of a spawned worker: connect, (schema), preload, run, verify, report."""
    # Ctrl-C reaches the whole process group: the parent stops the workers cleanly.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    worker: _CassandraWorker | _RedisWorker | None = None
    try:
        # Before the driver allocates anything: its memory is charged where it runs.
        envelope.join_from_env()
        worker = get_engine(config.engine).load_worker.get()(config, index, tag, stop)
        worker.connect()
        if isinstance(worker, _CassandraWorker):
            if index == 0:
                if config.create_schema:
                    worker.create_schema()
                schema_ready.set()
            elif not schema_ready.wait(timeout=120):
                raise KairosError("the schema was not ready within 120 s")
            worker.prepare()
        if config.preload:
            # A preload of millions of records takes minutes: the parent's startup timeout
            # is for connecting, not for this.
            messages.put(("preloading", index, None))
            worker.preload()
        messages.put(("started", index, None))
        plan = _Plan(config, index, stop)
        reporter_stop = threading.Event()

        def report() -> None:
            while not reporter_stop.wait(1.0):
                snap = (worker.progress() if isinstance(worker, _RedisWorker)
                        else worker.stats.snapshot())
                messages.put(("progress", index, snap))
                if isinstance(worker, _RedisWorker):
                    worker.read_evictions()  # through the failovers and restarts

        reporter = threading.Thread(target=report, daemon=True)
        reporter.start()
        worker.run(plan)
        seconds = time.monotonic() - plan.start
        reporter_stop.set()
        reporter.join()
        if isinstance(worker, _RedisWorker):
            payload = worker.payload()
        else:
            payload = worker.stats.payload()
            payload["acknowledged"] = worker.writer.acks.acknowledged
        messages.put(("progress", index, (sum(payload["ops"].values()),
                                          sum(payload["failures"].values()))))
        if config.verify:
            messages.put(("verifying", index, None))
            payload.update(worker.verify())
        if isinstance(worker, _RedisWorker):
            payload.update(worker.evictions())
        payload["seconds"] = seconds
        payload["stopped_by"] = plan.stopped_by
        messages.put(("result", index, payload))
    except BaseException as exc:
        messages.put(("error", index, worker_error(exc)))
        schema_ready.set()
    finally:
        if worker is not None:
            with contextlib.suppress(Exception):
                worker.close()


# ------------------------------------------------------------------------ orchestration
class LoadError(KairosError):
    """A worker failed to start or crashed (not an operation failure: those are counted)."""


class BackgroundLoad:
    """Run load in spawned worker processes while the caller does something else.

    Examples
    --------
    >>> with BackgroundLoad(engine="cassandra", cl="QUORUM", rate=500,
    ...                     max_seconds=600) as load:          # doctest: +SKIP
    ...     run_playbook("playbooks/rolling_restart.yml")
    >>> result = load.result()                                   # doctest: +SKIP
    >>> assert result.failed == 0 and result.lost_acknowledged_writes == 0

    Parameters
    ----------
    config : LoadConfig, optional
        The run; or give its fields as keyword arguments.
    max_seconds : float, default 600
        Safety limit: the workers stop on their own after this long (overrides
        ``config.seconds``).
    max_requests : int, default 2_000_000
        Safety limit on the request count (unless the config sets one).
    startup_timeout : float, default 120
        How long :meth:`start` waits for every worker to connect and begin.
    on_progress : callable, optional
        Called with ``(elapsed_s, ops, failures)`` about every second from a helper thread.
    """

    def __init__(
        self,
        config: LoadConfig | None = None,
        *,
        max_seconds: float = 600.0,
        max_requests: int | None = 2_000_000,
        startup_timeout: float = 120.0,
        on_progress: Any = None,
        **options: Any,
    ) -> None:
        if config is None:
            options.setdefault("seconds", max_seconds)
            config = LoadConfig(**options)
        elif options:
            config = replace(config, **options)
        config = replace(
            config,
            seconds=min(config.seconds, max_seconds),
            max_requests=config.max_requests if config.max_requests is not None
            else max_requests,
        )
        self.config = config
        self.startup_timeout = startup_timeout
        self.on_progress = on_progress
        self.tag = secrets.token_hex(4)
        self._ctx = mp.get_context("spawn")
        self._stop = self._ctx.Event()
        self._schema_ready = self._ctx.Event()
        self._messages: Any = self._ctx.Queue()
        self._procs: list[Any] = []
        self._progress: dict[int, tuple[int, int]] = {}
        self._started: set[int] = set()
        self._preloading: set[int] = set()  # workers writing every record before they start
        self._payloads: dict[int, dict[str, Any]] = {}
        self._errors: dict[int, str] = {}
        self._collector: threading.Thread | None = None
        self._done = threading.Event()
        self._began = 0.0
        self._result: LoadResult | None = None
        self._cond = threading.Condition()

    # -- lifecycle
    def start(self) -> BackgroundLoad:
        """Start the workers and wait until each one is connected and issuing operations."""
        if self._procs:
            raise LoadError("this load has already been started")
        collect.tls_settings(self.config.engine)  # unusable TLS files: refused before a worker
        self._began = time.monotonic()
        for i in range(self.config.processes):
            p = self._ctx.Process(
                target=_worker_main,
                args=(self.config, i, self.tag, self._stop, self._schema_ready, self._messages),
                name=f"kairos-load-{i}",
                daemon=True,
            )
            p.start()
            self._procs.append(p)
        self._collector = threading.Thread(target=self._collect, daemon=True,
                                           name="kairos-load-collector")
        self._collector.start()
        deadline = time.monotonic() + self.startup_timeout
        with self._cond:
            while len(self._started) + len(self._errors) < len(self._procs):
                left = deadline - time.monotonic()
                silent = set(range(len(self._procs))) - self._started - set(self._errors)
                if left <= 0 and silent - self._preloading:
                    break
                # past the deadline only while preloading: poll every 0.5 s until it ends
                if not self._cond.wait(timeout=min(left, 0.5) if left > 0 else 0.5) and not any(
                    p.is_alive() for p in self._procs
                ):
                    break
        if self._errors or len(self._started) < len(self._procs):
            exits = [f"worker {i} exited with code {p.exitcode}"
                     for i, p in enumerate(self._procs) if p.exitcode is not None]
            detail = next(iter(self._errors.values()), None) or "; ".join(exits) or (
                f"no answer within the startup timeout ({self.startup_timeout:g} s)")
            self._abort()
            raise LoadError(f"load workers did not start: {detail.strip().splitlines()[0]}\n"
                            f"{detail}")
        return self

    def _collect(self) -> None:
        pending = set(range(len(self._procs)))
        last_report = 0.0
        while pending:
            try:
                kind, index, data = self._messages.get(timeout=0.5)
            except queue.Empty:
                dead = {i for i in pending if not self._procs[i].is_alive()}
                if dead:
                    # A worker that died without a result message: give the queue a moment.
                    try:
                        kind, index, data = self._messages.get(timeout=2.0)
                    except queue.Empty:
                        with self._cond:
                            for i in dead:
                                self._errors.setdefault(
                                    i, f"worker {i} exited with code {self._procs[i].exitcode}")
                            pending -= dead
                            self._cond.notify_all()
                        continue
                else:
                    continue
            with self._cond:
                if kind == "started":
                    self._started.add(index)
                elif kind == "preloading":
                    self._preloading.add(index)
                elif kind == "progress":
                    self._progress[index] = data
                elif kind == "result":
                    self._payloads[index] = data
                    pending.discard(index)
                elif kind == "error":
                    self._errors[index] = data
                    pending.discard(index)
                self._cond.notify_all()
            now = time.monotonic()
            if self.on_progress is not None and kind == "progress" and now - last_report >= 0.9:
                last_report = now
                ops, fails = self.progress()
                with contextlib.suppress(Exception):
                    self.on_progress(now - self._began, ops, fails)
        self._done.set()

    def progress(self) -> tuple[int, int]:
        """(finished operations, failures) reported so far over all workers."""
        with self._cond:
            return (sum(p[0] for p in self._progress.values()),
                    sum(p[1] for p in self._progress.values()))

    def running(self) -> bool:
        return bool(self._procs) and not self._done.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until the workers have finished on their own (duration/max_requests)."""
        return self._done.wait(timeout)

    def stop(self, timeout: float | None = None) -> LoadResult:
        """Stop issuing, let in-flight requests finish, verify, and return the result."""
        if self._result is not None:
            return self._result
        if not self._procs:
            raise LoadError("this load was never started")
        self._stop.set()
        if timeout is None:
            timeout = 2 * self.config.request_timeout + 30 + self.config.max_keys / 2000
        if not self._done.wait(timeout):
            self._abort()
            raise LoadError(f"load workers did not finish within {timeout:.0f} s after stop")
        for p in self._procs:
            p.join(timeout=10)
            if p.is_alive():
                p.terminate()
        if self._errors:
            detail = next(iter(self._errors.values()))
            raise LoadError(f"load worker failed: {detail}")
        payloads = [self._payloads[i] for i in sorted(self._payloads)]
        seconds = max(p.get("seconds", 0.0) for p in payloads)
        reasons = {p.get("stopped_by", "duration") for p in payloads}
        stopped_by = next((r for r in ("stopped", "max_requests") if r in reasons), "duration")
        self._result = aggregate(self.config, payloads, seconds=seconds, stopped_by=stopped_by)
        return self._result

    def result(self) -> LoadResult:
        """The result (stops the load first if it is still running)."""
        return self._result if self._result is not None else self.stop()

    def _abort(self) -> None:
        self._stop.set()
        for p in self._procs:
            p.join(timeout=5)
            if p.is_alive():
                p.terminate()
                p.join(timeout=5)

    def __enter__(self) -> BackgroundLoad:
        return self.start()

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if self._result is None and self._procs:
            if exc_type is not None:
                self._abort()
                return
            self.stop()


def run_load(config: LoadConfig, *, on_progress: Any = None, startup_timeout: float = 120.0,
             ctrl_c_ends_run: bool = False) -> LoadResult:
    """Run ``config`` to its end (duration or request bound) and return the result.

    Ctrl-C stops the workers cleanly. With ``ctrl_c_ends_run`` (``kairos load``) it ends the
    run, whose result (stopped_by "stopped") is returned as any other; otherwise it is raised
    again once they stopped, so that a caller measuring windows (a calibration, a bench)
    never takes a window cut short for a whole one, nor goes on to its next.
    """
    load = BackgroundLoad(config, max_seconds=config.seconds, max_requests=config.max_requests,
                          startup_timeout=startup_timeout, on_progress=on_progress)
    load.start()
    try:
        while not load.wait(0.5):
            pass
    except KeyboardInterrupt:
        if not ctrl_c_ends_run:
            load.stop()
            raise
    return load.stop()
