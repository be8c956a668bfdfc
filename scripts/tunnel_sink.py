"""A tunnel benchmark's client: reads TARGET to EOF, directly or through a CONNECT proxy, and
prints the seconds taken and the bytes read.

    python3 scripts/tunnel_sink.py HOST:PORT [PROXY_HOST:PROXY_PORT]
"""
import socket
import sys
import time

target, proxy = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else "")
host, port = target.rsplit(":", 1)
start = time.monotonic()
if proxy:
    ph, pp = proxy.rsplit(":", 1)
    s = socket.create_connection((ph, int(pp)))
    s.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        b = s.recv(1)
        if not b:
            sys.exit("proxy closed during CONNECT")
        head += b
    if b" 200" not in head.split(b"\r\n")[0]:
        sys.exit(head.decode(errors="replace"))
else:
    s = socket.create_connection((host, int(port)))
buf = bytearray(1 << 20)
mv = memoryview(buf)
n = 0
while True:
    k = s.recv_into(mv)
    if not k:
        break
    n += k
print(f"{time.monotonic() - start:.4f} {n}")
