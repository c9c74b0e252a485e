"""A TCP proxy that freezes or drops a server's connections, for the outage tests."""

from __future__ import annotations

import contextlib
import socket
import threading
import time


class FreezingProxy:
    """A TCP proxy to the server whose open connections can be frozen: bytes stop flowing both
    ways while the sockets stay open, as when a network path drops without a reset. Connections
    made after a freeze flow normally."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.generation = 0
        self.closed = False
        self.refusing = False
        self.sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self.refusing:
                client.close()
                continue
            server = socket.create_connection(self.target)
            self.sockets += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b, self.generation),
                                 daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, generation: int) -> None:
        try:
            while data := src.recv(65536):
                while generation != self.generation and not self.closed:
                    time.sleep(0.05)  # frozen: hold these bytes and read no more
                if self.closed:
                    return
                dst.sendall(data)
        except OSError:
            pass

    def freeze(self) -> None:
        self.generation += 1

    def down(self) -> None:
        """The server drops out: every open connection is reset and new ones are refused
        (accepted, then closed at once) until :meth:`up`."""
        self.refusing = True
        for sock in self.sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        self.sockets = []

    def up(self) -> None:
        self.refusing = False

    def close(self) -> None:
        self.closed = True
        self.listener.close()
        for sock in self.sockets:
            sock.close()
