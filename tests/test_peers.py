"""Who called the model's port: the run's own opencode is the first opencode seen, for good
(issue 53: an opencode binary a tool daemonized, re-parented away from the run's, added
+2 turns and +18,310 input tokens to the row)."""

from __future__ import annotations

import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from harness.sandbox.peers import OPENCODE, TOOL, origin_of

BASH = shutil.which("bash")


def _connect_from(binary: Path, port: int) -> subprocess.Popen:
    """`binary` (a copy of bash standing in for opencode) opening a connection to `port` and holding it."""
    return subprocess.Popen([str(binary), "-c", f"exec 3<>/dev/tcp/127.0.0.1/{port}; read -t 30 <&3"],
                            start_new_session=True)


@pytest.mark.skipif(BASH is None or not Path("/proc/self/net/tcp").exists(), reason="needs bash and procfs")
def test_the_first_opencode_is_the_runs_and_a_second_one_is_a_tool(tmp_path: Path):
    opencode = tmp_path / "opencode"
    shutil.copy(BASH, opencode)
    pinned: list = []
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.settimeout(30)
        port = server.getsockname()[1]
        first = _connect_from(opencode, port)
        second = None
        try:
            conn, _ = server.accept()
            with conn:
                assert origin_of(conn, opencode, pinned) == OPENCODE
            first_again = _connect_from(opencode, port)  # not the pinned process: another opencode
            try:
                conn, _ = server.accept()
                with conn:
                    assert origin_of(conn, opencode, pinned) == TOOL
            finally:
                first_again.kill()
                first_again.wait(timeout=10)
            second = subprocess.Popen([BASH, "-c", f"exec 3<>/dev/tcp/127.0.0.1/{port}; read -t 30 <&3"])
            conn, _ = server.accept()
            with conn:
                assert origin_of(conn, opencode, pinned) == TOOL  # not the binary at all
        finally:
            for proc in (first, second):
                if proc is not None:
                    proc.kill()
                    proc.wait(timeout=10)
