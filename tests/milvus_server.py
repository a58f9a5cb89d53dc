"""A Milvus server in a process of its own: the gRPC server Milvus Lite ships
(`milvus_lite.adapter.grpc.server.start_server_in_thread`) over a data folder, on a free loopback port.
`MilvusServer(folder)` starts it and waits for its port (`.uri` is what `--store` takes); `.close()`
stops it (the child stops when its standard input closes, so it never outlives the test)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

CHILD = """
import sys
from milvus_lite.adapter.grpc.server import start_server_in_thread
server, db, port = start_server_in_thread(sys.argv[1])
print(port, flush=True)
sys.stdin.read()  # until the parent closes it
server.stop(grace=0)
db.close()
"""


class MilvusServer:
    def __init__(self, folder: Path, timeout: float = 60.0):
        self.process = subprocess.Popen([sys.executable, "-c", CHILD, str(folder)], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True)
        port = self.process.stdout.readline().strip()
        if not port.isdigit():
            self.close()
            raise RuntimeError(f"the Milvus server did not start (it printed {port!r})")
        self.uri = f"http://127.0.0.1:{port}"

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.close()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
