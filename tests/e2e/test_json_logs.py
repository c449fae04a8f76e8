"""With `server.log_format: json` (the default) every line a real `gateway serve` prints — its
own records, uvicorn's, the embedded store's start and stop, the worker process's, warnings —
is one JSON object with a level and a message or event, from start-up to SIGTERM."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import time
import warnings

import httpx

from gateway.ops.logs import (
    FORCED_EXIT_MESSAGE,
    REQUEST_CANCELLED_MESSAGE,
    ForcedExitFilter,
    JsonFormatter,
    JsonMessage,
    uvicorn_log_config,
)
from tests.support.processes import AUTH, Processes, gateway_config_file


def _lines(text: str) -> list[dict]:
    records = []
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            raise AssertionError(f"not a JSON line: {line!r}") from None
        assert isinstance(record, dict), line
        assert record.get("level") in ("debug", "info", "warning", "error", "critical"), line
        assert "message" in record or "event" in record, line
        records.append(record)
    return records


def test_every_line_of_a_gateway_process_is_one_json_object(tmp_path):
    with Processes(tmp_path) as procs:
        # The embedded store and a worker process (recorder.mode: process, the defaults).
        config = gateway_config_file(tmp_path / "config.yaml", "embedded",
                                     recorder={"mode": "process"})
        gateway = procs.gateway(config)
        deadline = time.monotonic() + 60
        while '"worker_started"' not in gateway.log_text() and time.monotonic() < deadline:
            time.sleep(0.1)  # the worker process logs once it is ready for turns
        with httpx.Client(timeout=20) as http:
            ok = http.post(gateway.url + "/v1/chat/completions",
                           headers={**AUTH, "X-Conversation-Id": "logged"},
                           json={"model": "echo",
                                 "messages": [{"role": "user", "content": "hello"}]})
            assert ok.status_code == 200
            bad = http.post(gateway.url + "/v1/chat/completions", headers=AUTH,
                            content=b"{not json")
            assert bad.status_code == 400
            assert http.get(gateway.url + "/v1/models").status_code == 401
        # Not HTTP at all: uvicorn itself logs this one.
        with socket.create_connection(("127.0.0.1", gateway.port), timeout=5) as raw:
            raw.sendall(b"NONSENSE\r\n\r\n")
            raw.recv(1024)
        assert gateway.terminate(60) == 0
        records = _lines(gateway.log_text())

    def logged(logger: str, needle: str) -> bool:
        return any(r["logger"].startswith(logger)
                   and needle in (r.get("message") or r.get("event") or "") for r in records)

    assert logged("uvicorn", "Started server process")
    assert logged("uvicorn", "Invalid HTTP request")
    assert logged("gateway.store.embedded", "embedded store started")
    assert logged("gateway.store.embedded", "embedded store stopped")
    assert logged("gateway.worker", "worker_started")
    assert logged("gateway.worker", "worker_stopped")
    assert logged("gateway", "shutdown_complete")
    requests = [r for r in records if r.get("event") == "chat_completion"]
    assert sorted(r["status"] for r in requests) == [200, 400]
    assert {r["conversation"] for r in requests if r["status"] == 200} == {"logged"}


def _format(record: logging.LogRecord) -> dict:
    line = JsonFormatter().format(record)
    assert "\n" not in line
    return json.loads(line)


def test_the_formatter_keeps_events_as_fields_and_tracebacks_in_the_line():
    event = logging.LogRecord("gateway.x", logging.WARNING, __file__, 1,
                              JsonMessage(event="thing", n=1, level="spoofed"), None, None)
    assert _format(event) | {"time": 0} == {"time": 0, "level": "warning",
                                            "logger": "gateway.x", "event": "thing", "n": 1}
    as_text = logging.LogRecord("gateway.x", logging.INFO, __file__, 1,
                                '{"event": "old_style", "url": "%s"}', ("u",), None)
    assert _format(as_text)["event"] == "old_style" and _format(as_text)["url"] == "u"
    try:
        raise ValueError("boom")
    except ValueError:
        import sys

        failed = logging.LogRecord("gateway.x", logging.ERROR, __file__, 1, "failed: %s",
                                   ("it",), sys.exc_info())
    out = _format(failed)
    assert out["message"] == "failed: it" and "ValueError: boom" in out["exc_info"]
    with warnings.catch_warnings(record=True):
        plain = logging.LogRecord("py.warnings", logging.WARNING, __file__, 1, "{not json}",
                                  None, None)
        assert _format(plain)["message"] == "{not json}"


def _record(level: int, msg: str) -> logging.LogRecord:
    return logging.LogRecord("uvicorn.error", level, __file__, 1, msg, (), None)


def test_a_forced_exit_s_cancelled_lifespan_is_one_warning_not_a_traceback():
    starlette_report = ("Traceback (most recent call last):\n  File \"x.py\", line 1, in f\n"
                        "gateway.cli._Signalled: 2\n\nDuring handling of the above exception, "
                        "another exception occurred:\n\nTraceback (most recent call last):\n"
                        "  File \"routing.py\", line 668, in lifespan\n"
                        "asyncio.exceptions.CancelledError\n")
    forced = _record(logging.ERROR, starlette_report)
    assert ForcedExitFilter().filter(forced)
    assert (forced.getMessage(), forced.levelname) == (FORCED_EXIT_MESSAGE, "WARNING")
    # Any other error, a traceback included, is left as it is.
    other = _record(logging.ERROR, "Traceback (most recent call last):\nValueError: x\n")
    assert ForcedExitFilter().filter(other)
    assert other.levelname == "ERROR" and other.getMessage().endswith("ValueError: x\n")


def _asgi_error(exc: BaseException) -> logging.LogRecord:
    return logging.LogRecord("uvicorn.error", logging.ERROR, __file__, 1,
                             "Exception in ASGI application\n", (),
                             (type(exc), exc, exc.__traceback__))


def test_a_request_the_shutdown_cancels_is_one_warning_not_a_traceback():
    cancelled = _asgi_error(asyncio.CancelledError())
    assert ForcedExitFilter().filter(cancelled)
    assert (cancelled.getMessage(), cancelled.levelname) == (REQUEST_CANCELLED_MESSAGE,
                                                              "WARNING")
    assert cancelled.exc_info is None
    assert "Traceback" not in json.dumps(_format(cancelled))
    # A request that failed for any other reason keeps its error and its traceback.
    failed = _asgi_error(ValueError("boom"))
    assert ForcedExitFilter().filter(failed)
    assert failed.levelname == "ERROR" and "ValueError: boom" in _format(failed)["exc_info"]


def test_both_log_formats_put_the_filter_on_uvicorn_s_error_logger():
    for log_format in ("json", "text"):
        config = uvicorn_log_config(log_format)  # type: ignore[arg-type]
        assert config["loggers"]["uvicorn.error"]["filters"] == ["forced_exit"]
        assert config["filters"]["forced_exit"] == {"()": "gateway.ops.logs.ForcedExitFilter"}
