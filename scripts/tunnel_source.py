"""A tunnel benchmark's source: every connection gets MIB MiB of zeros, then EOF.

    python3 scripts/tunnel_source.py ADDR PORT MIB

Used by scripts/bench-tls-path.sh (loopback) and scripts/bench-tunnel-wire.sh (across a
shaped veth link).
"""
import socket
import sys
import threading

addr, port, mib = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
chunk = memoryview(bytes(1 << 20))
listener = socket.socket()
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.bind((addr, port))
listener.listen(16)


def serve(c):
    with c:
        try:
            for _ in range(mib):
                c.sendall(chunk)
        except OSError:
            pass  # a readiness probe, or a client that gave up


while True:
    conn, _ = listener.accept()
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
