"""TCP tunnels to a service port inside an environment, and local listeners forwarding to them.

The route is ``GET /v1/environments/PROJECT/ENV/connect?service=S&port=P`` (WebSocket, binary
frames carry the TCP byte stream both ways).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import threading
from collections.abc import Awaitable, Callable
from types import TracebackType

from websockets.asyncio.client import ClientConnection as AsyncConnection
from websockets.exceptions import ConnectionClosed, ConnectionClosedOK
from websockets.sync.client import ClientConnection as SyncConnection

from ._base import close_info, closed_error
from ._errors import DenvError

logger = logging.getLogger("denv")

_READ = 64 * 1024


def _as_bytes(message: str | bytes) -> bytes:
    if isinstance(message, str):
        # The tunnel carries binary frames only; a text frame is the control plane's error.
        raise closed_error("connect", None, message)
    return message


def raise_unless_clean(exc: ConnectionClosed, target: str) -> None:
    """Raises the error a closed tunnel carries; returns for a clean end of the byte stream.

    Args:
        exc: How the WebSocket closed.
        target: What the tunnel reaches, for messages.

    Raises:
        DenvError: The close was abnormal, or its reason is a denv error body.
    """
    code, reason = close_info(exc)
    if isinstance(exc, ConnectionClosedOK) and '"error"' not in reason:
        return
    raise closed_error(f"connect {target}", code, reason) from exc


class Tunnel:
    """A TCP byte stream to ``service:port`` inside an environment (blocking).

    Use it as a context manager, or call :meth:`close`.
    """

    def __init__(self, conn: SyncConnection, target: str) -> None:
        self._conn = conn
        self.target = target

    def send(self, data: bytes) -> None:
        """Sends bytes to the service.

        Args:
            data: The bytes.

        Raises:
            DenvError: The tunnel was closed by the other side.
        """
        try:
            self._conn.send(bytes(data))
        except ConnectionClosed as exc:
            raise closed_error(f"connect {self.target}", *close_info(exc)) from exc

    def recv(self, timeout: float | None = None) -> bytes:
        """Receives the next bytes from the service.

        Args:
            timeout: Seconds to wait (None: until bytes arrive or the tunnel closes).

        Returns:
            The bytes; ``b""`` once the service closed the connection.

        Raises:
            TimeoutError: Nothing arrived within ``timeout`` (the built-in one).
            DenvError: The control plane ended the tunnel with an error.
        """
        try:
            return _as_bytes(self._conn.recv(timeout))
        except ConnectionClosed as exc:
            raise_unless_clean(exc, self.target)
            return b""

    def close(self) -> None:
        """Closes the tunnel (the service sees the TCP connection end)."""
        self._conn.close()

    def __enter__(self) -> Tunnel:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class PortForward:
    """A local TCP listener; each connection to it is tunnelled to ``service:port``.

    Runs on daemon threads. Use it as a context manager, or call :meth:`close`.

    Attributes:
        host: The local address it listens on.
        port: The local port (the one the OS picked when 0 was asked).
    """

    def __init__(self, open_tunnel: Callable[[], Tunnel], host: str, port: int) -> None:
        self._open = open_tunnel
        self._server = socket.create_server((host, port))
        self._server.settimeout(0.2)
        self.host: str = self._server.getsockname()[0]
        self.port: int = self._server.getsockname()[1]
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._live: set[socket.socket | Tunnel] = set()
        self._thread = threading.Thread(target=self._serve, name="denv-port-forward", daemon=True)
        self._thread.start()

    @property
    def address(self) -> str:
        """``host:port`` to connect to."""
        return f"{self.host}:{self.port}"

    def _serve(self) -> None:
        while not self._closed.is_set():
            try:
                sock, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            sock.settimeout(None)
            threading.Thread(target=self._handle, args=(sock,), daemon=True).start()

    def _track(self, item: socket.socket | Tunnel, add: bool) -> None:
        with self._lock:
            if add:
                self._live.add(item)
            else:
                self._live.discard(item)

    def _handle(self, sock: socket.socket) -> None:
        try:
            tunnel = self._open()
        except DenvError as exc:
            logger.warning("port-forward: cannot open the tunnel: %s", exc)
            sock.close()
            return
        self._track(sock, True)
        self._track(tunnel, True)

        def upstream() -> None:
            try:
                while data := sock.recv(_READ):
                    tunnel.send(data)
            except (OSError, DenvError):
                pass
            finally:
                tunnel.close()

        up = threading.Thread(target=upstream, daemon=True)
        up.start()
        try:
            while data := tunnel.recv():
                sock.sendall(data)
        except (OSError, DenvError):
            pass
        finally:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
            tunnel.close()
            up.join(timeout=5)
            self._track(sock, False)
            self._track(tunnel, False)

    def close(self) -> None:
        """Stops listening and closes every forwarded connection."""
        self._closed.set()
        self._server.close()
        with self._lock:
            live = list(self._live)
        for item in live:
            with contextlib.suppress(OSError):
                item.close()
        self._thread.join(timeout=5)

    def __enter__(self) -> PortForward:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class AsyncTunnel:
    """A TCP byte stream to ``service:port`` inside an environment (asyncio).

    Use it as an async context manager, or call :meth:`close`.
    """

    def __init__(self, conn: AsyncConnection, target: str) -> None:
        self._conn = conn
        self.target = target

    async def send(self, data: bytes) -> None:
        """Sends bytes to the service.

        Args:
            data: The bytes.

        Raises:
            DenvError: The tunnel was closed by the other side.
        """
        try:
            await self._conn.send(bytes(data))
        except ConnectionClosed as exc:
            raise closed_error(f"connect {self.target}", *close_info(exc)) from exc

    async def recv(self) -> bytes:
        """Receives the next bytes from the service.

        Returns:
            The bytes; ``b""`` once the service closed the connection.

        Raises:
            DenvError: The control plane ended the tunnel with an error.
        """
        try:
            return _as_bytes(await self._conn.recv())
        except ConnectionClosed as exc:
            raise_unless_clean(exc, self.target)
            return b""

    async def close(self) -> None:
        """Closes the tunnel."""
        await self._conn.close()

    async def __aenter__(self) -> AsyncTunnel:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


class AsyncPortForward:
    """A local TCP listener (asyncio); each connection is tunnelled to ``service:port``.

    Create it with :meth:`denv.AsyncClient.port_forward`; use it as an async context
    manager, or call :meth:`close`.

    Attributes:
        host: The local address it listens on.
        port: The local port.
    """

    def __init__(self, open_tunnel: Callable[[], Awaitable[AsyncTunnel]]) -> None:
        self._open = open_tunnel
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.host = ""
        self.port = 0

    async def start(self, host: str, port: int) -> AsyncPortForward:
        """Starts listening.

        Args:
            host: Local address.
            port: Local port (0: any free port).

        Returns:
            Itself.
        """
        self._server = await asyncio.start_server(self._on_client, host, port)
        sockname = self._server.sockets[0].getsockname()
        self.host, self.port = sockname[0], sockname[1]
        return self

    @property
    def address(self) -> str:
        """``host:port`` to connect to."""
        return f"{self.host}:{self.port}"

    async def _on_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            try:
                tunnel = await self._open()
            except DenvError as exc:
                logger.warning("port-forward: cannot open the tunnel: %s", exc)
                return

            async def upstream() -> None:
                try:
                    while data := await reader.read(_READ):
                        await tunnel.send(data)
                except (OSError, DenvError):
                    pass
                finally:
                    await tunnel.close()

            up = asyncio.create_task(upstream())
            try:
                while data := await tunnel.recv():
                    writer.write(data)
                    await writer.drain()
            except (OSError, DenvError):
                pass
            finally:
                up.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await up
                await tunnel.close()
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
            if task is not None:
                self._tasks.discard(task)

    async def close(self) -> None:
        """Stops listening and closes every forwarded connection."""
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._server is not None:
            with contextlib.suppress(Exception):
                await self._server.wait_closed()

    async def __aenter__(self) -> AsyncPortForward:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()
