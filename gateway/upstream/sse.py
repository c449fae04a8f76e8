"""Server-sent events read from a byte stream: each event's `data` payload, as bytes.

Only what OpenAI-compatible chat streams use: `data:` lines (several in one event are joined
with a newline, as the SSE spec says), events ending at a blank line, `\\n` or `\\r\\n` line
ends. Comments (`: keep-alive`) and the `event`, `id` and `retry` fields are skipped. The
payload is returned as the upstream sent it — never decoded and re-encoded — so it can be
forwarded byte for byte.
"""

from __future__ import annotations

from typing import AsyncIterator


async def data_payloads(pieces: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """The `data` of each event in `pieces` (arbitrary cuts of the stream), in order.
    An event the stream ends in without its blank line is still given."""
    pending = b""
    data: list[bytes] = []
    async for piece in pieces:
        pending += piece
        if b"\n" not in piece:
            continue
        *lines, pending = pending.split(b"\n")
        for line in lines:
            if line.endswith(b"\r"):
                line = line[:-1]
            if not line:
                if data:
                    yield data[0] if len(data) == 1 else b"\n".join(data)
                    data = []
            elif line.startswith(b"data:"):
                value = line[5:]
                data.append(value[1:] if value.startswith(b" ") else value)
    if pending.startswith(b"data:"):
        value = pending.removesuffix(b"\r")[5:]
        data.append(value[1:] if value.startswith(b" ") else value)
    if data:
        yield b"\n".join(data)
