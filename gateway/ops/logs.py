"""How the gateway's processes write their logs: `server.log_format`.

`json` (the default): every line a process writes to stdout is one JSON object with `time`
(unix seconds), `level`, `logger`, and either the fields of a structured event (`event`, ...)
or a `message`; a traceback goes in `exc_info`, inside the same line. That holds for the
gateway's own records, uvicorn's (through `uvicorn_log_config`), Python warnings, uncaught
exceptions and the worker process (configured the same way). `text`: the message alone, and
uvicorn's own format — as before this switch existed.

Structured events are logged as a `JsonMessage` (a dict: no encode-parse-encode on the request
path) or as a JSON object string (parsed back into fields here).
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import threading
from types import TracebackType
from typing import Any, Literal

LogFormat = Literal["json", "text"]
_RESERVED = ("time", "level", "logger")


class JsonMessage(dict):  # type: ignore[type-arg]
    """A structured log event: its fields as they are to the JSON formatter, one JSON object
    as text to any other (`str()`)."""

    def __str__(self) -> str:
        return json.dumps(self, ensure_ascii=False, default=str)


class JsonFormatter(logging.Formatter):
    """One log record as one line of JSON."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {"time": round(record.created, 3),
                               "level": record.levelname.lower(), "logger": record.name}
        fields = _fields(record)
        if fields is None:
            out["message"] = record.getMessage()
        else:
            # The event's own time (the request log line has one) is kept; level and logger
            # are the record's.
            out.update({k: v for k, v in fields.items() if k not in _RESERVED[1:]})
        if record.exc_info:
            out["exc_info"] = self.formatException(record.exc_info)
        if record.stack_info:
            out["stack_info"] = self.formatStack(record.stack_info)
        return json.dumps(out, ensure_ascii=False, default=str)


def _fields(record: logging.LogRecord) -> dict[str, Any] | None:
    if isinstance(record.msg, JsonMessage) and not record.args:
        return record.msg
    message = record.getMessage()
    if message.startswith("{") and message.endswith("}"):
        try:
            parsed = json.loads(message)
        except ValueError:
            return None
        return parsed if isinstance(parsed, dict) else None
    return None


def formatter(log_format: LogFormat) -> logging.Formatter:
    return JsonFormatter() if log_format == "json" else logging.Formatter("%(message)s")


def configure_logging(level: str, log_format: LogFormat) -> None:
    """One line per record on stdout: the gateway's own loggers at `level`, libraries (litellm
    logs every call at INFO) at WARNING; in `json`, warnings and uncaught exceptions too."""
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(formatter(log_format))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)
    logging.getLogger("gateway").setLevel(level.upper())
    if log_format == "json":
        # Without these, a warning or a crash would print free text to stderr.
        logging.captureWarnings(True)
        sys.excepthook = _log_uncaught
        threading.excepthook = _log_uncaught_in_thread


FORCED_EXIT_MESSAGE = ("lifespan cancelled by a forced exit (SIGINT during shutdown); the "
                       "gateway's shutdown ran in that cancellation")
REQUEST_CANCELLED_MESSAGE = ("request cancelled by the shutdown (a forced exit, or the end of "
                             "server.shutdown_timeout_seconds)")


class ForcedExitFilter(logging.Filter):
    """One warning line instead of a traceback logged as an error, for the work a shutdown
    cancels on purpose.

    uvicorn's forced exit (SIGINT while it shuts down, e.g. a second Ctrl-C) skips the
    lifespan's shutdown; the event loop's teardown then cancels the lifespan instead, the
    gateway's shutdown runs in that cancellation (gateway.http.app: the store and worker stop as
    usual), and starlette reports the CancelledError as a failed shutdown, which uvicorn logs
    as an error: the traceback text as the message. The same teardown (or the end of
    `timeout_graceful_shutdown`) cancels the requests still in flight, and uvicorn logs each
    as "Exception in ASGI application" with the CancelledError attached."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.ERROR or not isinstance(record.msg, str):
            return True
        if record.msg.startswith("Traceback") \
                and record.msg.rstrip().endswith("asyncio.exceptions.CancelledError"):
            self._warn(record, FORCED_EXIT_MESSAGE)
        elif record.msg.startswith("Exception in ASGI application") and record.exc_info \
                and isinstance(record.exc_info[1], asyncio.CancelledError):
            self._warn(record, REQUEST_CANCELLED_MESSAGE)
        return True

    @staticmethod
    def _warn(record: logging.LogRecord, message: str) -> None:
        record.msg, record.args = message, ()
        record.exc_info, record.exc_text = None, None
        record.levelno, record.levelname = logging.WARNING, "WARNING"


def uvicorn_log_config(log_format: LogFormat) -> dict[str, Any]:
    """uvicorn's `log_config`: its own loggers through the JSON formatter on stdout (`json`)
    or its default configuration (`text`), with `ForcedExitFilter` on `uvicorn.error`."""
    filters = {"forced_exit": {"()": "gateway.ops.logs.ForcedExitFilter"}}
    if log_format != "json":
        from uvicorn.config import LOGGING_CONFIG

        config: dict[str, Any] = json.loads(json.dumps(LOGGING_CONFIG))  # a deep copy
        config["filters"] = filters
        config["loggers"]["uvicorn.error"]["filters"] = ["forced_exit"]
        return config
    handler = {"class": "logging.StreamHandler", "formatter": "json",
               "stream": "ext://sys.stdout"}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": "gateway.ops.logs.JsonFormatter"}},
        "filters": filters,
        "handlers": {"default": handler},
        "loggers": {
            "uvicorn": {"handlers": ["default"], "level": "INFO", "propagate": False},
            "uvicorn.error": {"level": "INFO", "filters": ["forced_exit"]},
            "uvicorn.access": {"handlers": ["default"], "level": "INFO", "propagate": False},
        },
    }


def _log_uncaught(kind: type[BaseException], value: BaseException,
                  traceback: TracebackType | None) -> None:
    logging.getLogger("gateway").critical(
        JsonMessage(event="uncaught_exception", error=repr(value)),
        exc_info=(kind, value, traceback))


def _log_uncaught_in_thread(args: threading.ExceptHookArgs) -> None:
    if args.exc_type is SystemExit:
        return
    logging.getLogger("gateway").critical(
        JsonMessage(event="uncaught_exception", thread=getattr(args.thread, "name", None),
                    error=repr(args.exc_value)),
        exc_info=(args.exc_type, args.exc_value, args.exc_traceback))  # type: ignore[arg-type]
