"""A fake MySQL server on 127.0.0.1 that asks every client for the auth plugin of its choosing (AuthSwitchRequest)
and records every byte the clients send it: a hostile host the pollers were pointed at."""

import socket
import ssl
import threading

from lab.proxysql_double import protocol as p


CLIENT_SSL = 0x0800


class FakeMySQL:
    """`with FakeMySQL(b"mysql_clear_password") as fake:` listens on fake.port; fake.received() is what came in."""

    def __init__(
        self,
        plugin=b"mysql_clear_password",
        plugin_data=None,
        *,
        in_handshake=False,
        tls=None,
        host="127.0.0.1",
        demand_tls=False,
    ):
        self.plugin = plugin
        self.tls = tls  # an ssl.SSLContext (server side): TLS offered, and taken when the client asks
        # A client that does not ask for TLS is refused as require_secure_transport=ON refuses it (MySQL's 3159).
        self.demand_tls = demand_tls
        self.tls_sessions = 0  # connections that went over TLS
        self.in_handshake = in_handshake  # name the plugin in the first packet, not in an AuthSwitchRequest
        self.plugin_data = plugin_data
        self.host = host  # another loopback address (127.0.0.2) stands for a host outside an allowed list
        self._sock = socket.create_server((host, 0))
        self.port = self._sock.getsockname()[1]
        self._chunks = []
        self._lock = threading.Lock()
        self._threads = []

    def __enter__(self):
        self._accepting = threading.Thread(target=self._accept, daemon=True)
        self._accepting.start()
        return self

    def __exit__(self, *exc):
        self._sock.close()
        for t in self._threads:
            t.join(5)

    def received(self):
        with self._lock:
            return b"".join(self._chunks)

    def _accept(self):
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            t = threading.Thread(target=self._session, args=(conn,), daemon=True)
            self._threads.append(t)
            t.start()

    def _read_packet(self, conn):
        header = self._read(conn, 4)
        length = int.from_bytes(header[:3], "little")
        return header[3], self._read(conn, length)

    def _read(self, conn, n):
        data = b""
        while len(data) < n:
            chunk = conn.recv(n - len(data))
            if not chunk:
                raise ConnectionError("closed")
            with self._lock:
                self._chunks.append(chunk)
            data += chunk
        return data

    def _session(self, conn):
        conn.settimeout(3)
        try:
            scramble = p.new_scramble()
            w = p.PacketWriter(0)
            hello = p.handshake_v10(1, scramble, "8.0.36-fake")
            if self.in_handshake:
                hello = hello[: -len(p.NATIVE_PLUGIN) - 1] + self.plugin + b"\x00"
            if self.tls is not None:  # CLIENT_SSL in the capability flags' lower half
                at = hello.index(b"\x00") + 1 + 4 + 8 + 1
                caps = int.from_bytes(hello[at : at + 2], "little") | CLIENT_SSL
                hello = hello[:at] + caps.to_bytes(2, "little") + hello[at + 2 :]
            w.packet(hello)
            conn.sendall(w.take())
            seq, answer = self._read_packet(conn)
            if self.tls is not None and len(answer) == 32:  # an SSLRequest: the rest goes over TLS
                conn = self.tls.wrap_socket(conn, server_side=True)
                with self._lock:
                    self.tls_sessions += 1
                seq, _ = self._read_packet(conn)
            elif self.demand_tls:
                w = p.PacketWriter(seq + 1)
                w.err(3159, "Connections using insecure transport are prohibited while --require_secure_transport=ON.")
                conn.sendall(w.take())
                return
            if not self.in_handshake:
                # Whatever the client answered, ask for this plugin: a cleartext one gets the password as it is.
                data = scramble + b"\x00" if self.plugin_data is None else self.plugin_data
                w = p.PacketWriter(seq + 1)
                w.packet(b"\xfe" + self.plugin + b"\x00" + data)
                conn.sendall(w.take())
                seq, _ = self._read_packet(conn)
            w = p.PacketWriter(seq + 1)
            w.ok()
            conn.sendall(w.take())
            while True:  # record the rest (statements) until the client goes
                seq, payload = self._read_packet(conn)
                if payload[:1] == b"\x01":
                    return
                w = p.PacketWriter(seq + 1)
                w.ok()
                conn.sendall(w.take())
        except (OSError, ConnectionError, ssl.SSLError):
            pass
        finally:
            conn.close()
