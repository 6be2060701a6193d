import os
import socket
import subprocess
from pathlib import Path


def pid():
    return int(Path("/app/server.pid").read_text())


def test_pid_is_alive():
    os.kill(pid(), 0)


def test_proc_entry_is_the_server():
    assert b"http.server" in Path(f"/proc/{pid()}/cmdline").read_bytes()


def test_kill_zero_in_shell():
    assert subprocess.run(["sh", "-c", f"kill -0 {pid()}"]).returncode == 0


def test_it_listens():
    socket.create_connection(("127.0.0.1", 8766), 2).close()
