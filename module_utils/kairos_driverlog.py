"""Where the client libraries' own log goes: a file, never the operator's output (issue 40).

cassandra-driver logs a refused connection, a host marked down or a failed control
connection through :mod:`logging`, with its traceback, even when the caller catches the
exception and reports it in one clean line. Under Mitogen a module runs in a child whose
root logger forwards every record to the controller, which prints it among the tasks: a
fault run's rollout output held tracebacks no task had failed with. :func:`route_driver_log`
gives the drivers' loggers ("cassandra", "redis") a handler of their own that appends to a
file and stops them from propagating to the root logger, so nothing they log reaches
stderr, stdout or the controller. It is called where a driver client is made (the modules'
:func:`kairos_cql.build_cluster` and :class:`kairos_redis.Node`, the planner's clients), so
it holds in every process that opens a session, however that process was started.

Plain Python, no Ansible import: the planner imports it too (planner/_module_utils.py).
"""

from __future__ import annotations

import logging
import logging.handlers
import os

#: The loggers the client libraries log under (their children inherit the handler).
DRIVER_LOGGERS = ("cassandra", "redis")
#: The environment variable naming the file (e.g. ``<state dir>/driver.log``).
DRIVER_LOG_ENV = "KAIROS_DRIVER_LOG"
#: Where the log goes when neither the caller nor the environment names a file.
DEFAULT_DRIVER_LOG = "~/.ansible/kairos-driver.log"
#: The records kept: what the drivers' warnings and errors used to print, tracebacks included.
DRIVER_LOG_LEVEL = logging.WARNING
_FORMAT = "%(asctime)s pid=%(process)d %(name)s %(levelname)s %(message)s"


class _DriverLogHandler(logging.handlers.WatchedFileHandler):
    """Appends to the driver log (reopened if logrotate moved it); a write that fails is
    dropped, not reported on stderr as logging's default handleError does."""

    def handleError(self, record):
        """Drop the record: the operator's output must not carry a logging error either."""


def driver_log_path(path=None):
    """The file the drivers log to: ``path``, else $KAIROS_DRIVER_LOG, else the default."""
    chosen = path or os.environ.get(DRIVER_LOG_ENV) or DEFAULT_DRIVER_LOG
    return os.path.abspath(os.path.expanduser(chosen))


def _file_handler(target):
    """A handler appending to ``target``; where it cannot be written, one that drops all."""
    try:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "a", encoding="utf-8"):  # fails here, not at the first record
            pass
        handler = _DriverLogHandler(target, delay=True)
    except OSError:
        handler = logging.NullHandler()
        target = ""
    handler.kairos_driver_log = target
    handler.setFormatter(logging.Formatter(_FORMAT))
    return handler


def route_driver_log(path=None):
    """Send the drivers' log records to a file only; return its path ("" if unwritable).

    Idempotent: a process that calls it for every session keeps one handler per logger,
    replaced when the path changes. Nothing is written until a driver logs.
    """
    target = driver_log_path(path)
    loggers = [logging.getLogger(name) for name in DRIVER_LOGGERS]
    handler = next((h for h in loggers[0].handlers if hasattr(h, "kairos_driver_log")), None)
    if handler is None or handler.kairos_driver_log != target:
        handler = _file_handler(target)
        for logger in loggers:
            for old in [h for h in logger.handlers if hasattr(h, "kairos_driver_log")]:
                logger.removeHandler(old)
                old.close()
            logger.addHandler(handler)
    for logger in loggers:
        logger.setLevel(DRIVER_LOG_LEVEL)
        logger.propagate = False
    return handler.kairos_driver_log
