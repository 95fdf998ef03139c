#!/usr/bin/env python3
"""RSS of a queryd --http server before and after N `initialize` calls (issue 13, finding 7).
Usage: scripts/http-rss-flood.py QUERYD INDEX [N] [extra queryd args...]"""
import json, os, re, socket, subprocess, sys, time
queryd, index = sys.argv[1], sys.argv[2]
n = int(sys.argv[3]) if len(sys.argv) > 3 else 8000
extra = sys.argv[4:]
p = subprocess.Popen([queryd, "--index", index, "--http", "127.0.0.1:0", *extra],
                     stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
port = None
for line in p.stderr:
    m = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
    if m:
        port = int(m.group(1)); break
def rss():
    for l in open(f"/proc/{p.pid}/status"):
        if l.startswith("VmRSS:"):
            return int(l.split()[1]) // 1024
body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "flood", "version": "0"}}}).encode()
req = (f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n"
       f"Accept: application/json, text/event-stream\r\nContent-Type: application/json\r\n"
       f"Content-Length: {len(body)}\r\n\r\n").encode() + body
before = rss(); statuses = {}
t = time.time()
for i in range(n):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(req)
    data = b""
    while True:
        c = s.recv(65536)
        if not c: break
        data += c
        if b"\"id\":1" in data and data.endswith(b"\n\n"): break
        if b"503" in data[:12] and b"\r\n\r\n" in data and data.rstrip().endswith(b"}"): break
    s.close()
    st = data[9:12].decode(errors="replace")
    statuses[st] = statuses.get(st, 0) + 1
after = rss()
print(f"{os.path.basename(queryd)}: RSS before {before} MB, after {n} initialize calls {after} MB "
      f"({time.time()-t:.1f} s); statuses {statuses}")
p.kill()
