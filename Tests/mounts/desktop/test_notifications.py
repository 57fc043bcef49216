"""Part 19: desktop notifications. A new conflict raises one notification on the user's session bus
(org.freedesktop.Notifications), with the file's path; `mount --no-notify` raises none. The test runs a real
session bus (`dbus-daemon --session`) and reads the calls with `dbus-monitor`."""
import os
import signal
import subprocess
import threading
import time

import pytest

from conftest import attr, run, sync, wait_until

REL = "Documents/notes.txt"


@pytest.fixture
def session_bus(monkeypatch):
    """A session bus of the test's own, named in the environment the mounts' daemons inherit, and the lines
    `dbus-monitor` prints of the notification calls on it."""
    out = run("dbus-daemon", "--session", "--fork", "--print-address=1", "--print-pid=1").stdout.split("\n")
    address, pid = out[0], int(out[1])
    monkeypatch.setenv("DBUS_SESSION_BUS_ADDRESS", address)
    monitor = subprocess.Popen(["dbus-monitor", "interface='org.freedesktop.Notifications'"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    lines = []
    threading.Thread(target=lambda: [lines.append(line.rstrip("\n")) for line in monitor.stdout], daemon=True).start()
    wait_until(lambda: any("NameAcquired" in line for line in lines), timeout=15, what="dbus-monitor to start")
    yield lines
    monitor.terminate()
    monitor.wait(timeout=10)
    os.kill(pid, signal.SIGTERM)


def notifications(lines):
    """The (summary, body) of each Notify call the monitor printed."""
    calls, i = [], 0
    while i < len(lines):
        if "member=Notify" in lines[i]:
            strings = [line.strip()[len('string "'):-1] for line in lines[i + 1:i + 9] if line.strip().startswith('string "')]
            if len(strings) >= 4:
                calls.append((strings[2], strings[3]))
        i += 1
    return calls


def test_a_conflict_raises_one_notification_with_its_path_and_no_notify_raises_none(stub, mount_factory, session_bus):
    a = mount_factory(stub, "laptop")
    b = mount_factory(stub, "desktop", extra=["--no-notify"])
    (a / REL).write_text("original\n")
    sync(a)
    wait_until(lambda: (b / REL).exists(), timeout=30, what="the file on the desktop")
    stub.stop()
    (a / REL).write_text("laptop version\n")
    time.sleep(1.1)
    (b / REL).write_text("desktop version\n")
    stub.start()
    for m in (a, b):
        wait_until(lambda: attr(m / REL, "hasUnresolvedConflicts") == "1", timeout=40, what=f"the conflict on {m.device}")
    wait_until(lambda: notifications(session_bus), timeout=15, what=f"a notification (monitor: {session_bus[-10:]})")
    time.sleep(5)  # the desktop, with --no-notify, would have told by now too
    calls = notifications(session_bus)
    assert len(calls) == 1, calls
    summary, body = calls[0]
    assert summary == "Conflict: notes.txt" and f"{a.path}/{REL}" in body and ".versions" in body, calls
