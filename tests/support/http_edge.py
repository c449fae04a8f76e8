"""The upstream HTTP edge for clients respx cannot intercept (the direct path's aiohttp
session): a real loopback HTTP/1.1 server that answers each request from a respx router.

Tests keep writing `router.post(URL).respond(...)` and reading `route.calls`; the request
arrives over a real socket. A route's side effect that raises stands for what the client
would have met on the wire: an httpx timeout -> the server says nothing until the client
gives up; any other transport error -> the server hangs up without an answer. A response
whose stream raises midway is cut there (the connection dropped).

    with http_edge() as edge:          # edge.url "http://127.0.0.1:<port>"
        edge.router = respx.MockRouter()
        DirectUpstream(resolver=edge.resolver("upstream.test"))
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager

import httpx
import respx
from aiohttp.abc import AbstractResolver, ResolveResult

# How long a "timeout" waits for the client to hang up before giving up itself.
_SILENCE_SECONDS = 10.0


class Edge:
    """The server's state: the router it answers from, and the connections it accepted."""

    def __init__(self) -> None:
        self.router: respx.Router = respx.MockRouter()
        self.connections = 0
        self._serving: set[asyncio.Task[None]] = set()
        self.url = ""
        self.port = 0

    def resolver(self, *hosts: str) -> AbstractResolver:
        """An aiohttp resolver sending `hosts` (any port) to this server."""
        return _LoopbackResolver(set(hosts), self.port)

    async def serve_connection(self, reader: asyncio.StreamReader,
                               writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        task = asyncio.current_task()
        assert task is not None
        self._serving.add(task)
        try:
            while (request := await _read_request(reader)) is not None:
                try:
                    response = self.router.handler(request)
                except httpx.TimeoutException:
                    await asyncio.wait_for(reader.read(), _SILENCE_SECONDS)
                    return
                except httpx.TransportError:
                    return  # hang up without an answer
                if not await _write_response(writer, response):
                    return
        except (asyncio.IncompleteReadError, ConnectionError, TimeoutError):
            return
        finally:
            self._serving.discard(task)
            writer.close()

    async def close_connections(self) -> None:
        for task in list(self._serving):
            task.cancel()
        await asyncio.gather(*self._serving, return_exceptions=True)


@contextmanager
def http_edge() -> Iterator[Edge]:
    """Serve an Edge on a free loopback port, in a thread with its own event loop."""
    edge = Edge()
    loop = asyncio.new_event_loop()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    edge.port = sock.getsockname()[1]
    edge.url = f"http://127.0.0.1:{edge.port}"
    server = loop.run_until_complete(asyncio.start_server(edge.serve_connection, sock=sock))
    thread = threading.Thread(target=loop.run_forever, name=f"edge-{edge.port}", daemon=True)
    thread.start()
    try:
        yield edge
    finally:
        loop.call_soon_threadsafe(server.close)
        asyncio.run_coroutine_threadsafe(edge.close_connections(), loop).result(timeout=5)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=5)
        loop.close()


async def _read_request(reader: asyncio.StreamReader) -> httpx.Request | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None  # the client closed the connection between requests
    request_line, *lines = head.decode("latin-1").split("\r\n")[:-2]
    method, target, _ = request_line.split(" ", 2)
    headers = [(name.strip(), value.strip())
               for name, value in (line.split(":", 1) for line in lines)]
    fields = {name.lower(): value for name, value in headers}
    body = await reader.readexactly(int(fields.get("content-length", 0)))
    return httpx.Request(method, f"http://{fields['host']}{target}", headers=headers,
                         content=body)


async def _write_response(writer: asyncio.StreamWriter, response: httpx.Response) -> bool:
    """The response, chunked; False when its stream failed and the connection was cut."""
    head = [f"HTTP/1.1 {response.status_code} {response.reason_phrase}"]
    head += [f"{name}: {value}" for name, value in response.headers.multi_items()
             if name.lower() not in ("content-length", "transfer-encoding")]
    head.append("transfer-encoding: chunked")
    writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
    try:
        async for piece in _pieces(response):
            if piece:
                writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                await writer.drain()
    except httpx.TransportError:
        await writer.drain()
        writer.transport.abort()
        return False
    writer.write(b"0\r\n\r\n")
    await writer.drain()
    return True


async def _pieces(response: httpx.Response) -> AsyncIterator[bytes]:
    stream = response.stream
    if isinstance(stream, httpx.AsyncByteStream):
        async for piece in stream:
            yield piece
    else:
        for piece in stream:  # type: ignore[union-attr]
            yield piece


class _LoopbackResolver(AbstractResolver):
    def __init__(self, hosts: set[str], port: int) -> None:
        self._hosts = hosts
        self._port = port

    async def resolve(self, host: str, port: int = 0,
                      family: socket.AddressFamily = socket.AF_INET) -> list[ResolveResult]:
        if host not in self._hosts:
            raise OSError(f"{host} is not served by this edge")
        return [ResolveResult(hostname=host, host="127.0.0.1", port=self._port,
                              family=socket.AF_INET, proto=0, flags=0)]

    async def close(self) -> None:
        return None
