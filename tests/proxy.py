"""A loopback TCP proxy in front of the test PostgreSQL, for network faults.

    proxy = Proxy(target_port).start()
    dsn = proxy.dsn(db_dsn)          # the same database, through the proxy
    proxy.blackhole()                # a network cut: sockets stay open, no byte moves
    proxy.heal()                     # bytes flow again, held ones first (as TCP would)
    proxy.drop()                     # every current connection closed, both sides
    proxy.lose_reply_to(b"...")      # the next statement containing these bytes runs,
                                     # but its reply never reaches the client

It runs an asyncio loop in a daemon thread of the test process. While blackholed it
reads nothing, so what a client sends waits in the kernel's buffers and reaches the
server after the heal, like a retransmission; clients see no error (the kernel of
the proxy still acknowledges and answers keepalives: a half-open path no TCP timer of
the client can detect, as behind a pooler or any TCP proxy).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Any

from psycopg.conninfo import make_conninfo

CHUNK = 65536
READY_FOR_QUERY = b"Z\x00\x00\x00\x05"  # the server's message: done, idle again


class Proxy:
    def __init__(self, target_port: int, target_host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self.port = 0
        self.connections_made = 0
        self.replies_lost = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, daemon=True, name="test-proxy"
        )
        self._pairs: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = set()
        self._flowing: asyncio.Event | None = None
        self._server: asyncio.Server | None = None
        self._lose_reply_to: bytes | None = None

    # -- control, from the test's thread -------------------------------------------------

    def start(self) -> Proxy:
        self._thread.start()
        self._call(self._listen())
        return self

    def dsn(self, dsn: str) -> str:
        return make_conninfo(dsn, host="127.0.0.1", port=self.port)

    def blackhole(self) -> None:
        self._call(self._set_flowing(False))

    def heal(self) -> None:
        self._call(self._set_flowing(True))

    def drop(self) -> int:
        """Close every current connection; returns how many there were."""
        return self._call(self._drop_all())

    def lose_reply_to(self, marker: bytes) -> None:
        """Arm: the next client chunk containing `marker` is forwarded, the server's
        answer read and thrown away, then both sides closed."""
        self._call(self._arm(marker))

    def close(self) -> None:
        if self._thread.is_alive():
            self._call(self._shutdown())
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)
        if not self._thread.is_alive():
            self._loop.close()

    def _call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=10)

    # -- the loop's side -------------------------------------------------------------------

    async def _listen(self) -> None:
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _set_flowing(self, flowing: bool) -> None:
        assert self._flowing is not None
        if flowing:
            self._flowing.set()
        else:
            self._flowing.clear()

    async def _arm(self, marker: bytes) -> None:
        self._lose_reply_to = marker

    async def _drop_all(self) -> int:
        pairs = list(self._pairs)
        for client, server in pairs:
            _abort(client)
            _abort(server)
        return len(pairs)

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        assert self._flowing is not None
        self._flowing.set()  # a pump waiting on the cut sees its socket closed and ends
        await self._drop_all()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        if tasks:
            await asyncio.wait(tasks, timeout=5)
        if self._server is not None:
            await self._server.wait_closed()

    async def _accept(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        self.connections_made += 1
        try:
            server_r, server_w = await asyncio.open_connection(*self.target)
        except OSError:
            _abort(client_w)
            return
        pair = (client_w, server_w)
        self._pairs.add(pair)
        reply_lost = asyncio.Event()  # set: the server's next answer goes nowhere
        try:
            await asyncio.gather(
                self._pump(client_r, server_w, watch=reply_lost),
                self._pump(server_r, client_w, lose=reply_lost),
                return_exceptions=True,
            )
        finally:
            self._pairs.discard(pair)
            _abort(client_w)
            _abort(server_w)

    async def _pump(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        watch: asyncio.Event | None = None,
        lose: asyncio.Event | None = None,
    ) -> None:
        assert self._flowing is not None
        tail = b""  # a marker may straddle two chunks
        try:
            while True:
                await self._flowing.wait()  # blackholed: read nothing, hold what we have
                data = await reader.read(CHUNK)
                if not data:
                    break
                await self._flowing.wait()
                if lose is not None and lose.is_set():
                    # Thrown away up to ReadyForQuery, sent after the commit: the
                    # statement took effect, the client never hears of it.
                    if READY_FOR_QUERY in tail + data:
                        self.replies_lost += 1
                        break
                    tail = data[-256:]
                    continue
                marker = self._lose_reply_to
                if watch is not None and marker is not None and marker in tail + data:
                    self._lose_reply_to = None
                    watch.set()  # before the write: the answer cannot come first
                writer.write(data)
                await writer.drain()
                tail = data[-256:]
        except (ConnectionError, OSError):
            pass
        finally:
            _abort(writer)


def _abort(writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(Exception):
        writer.transport.abort()
