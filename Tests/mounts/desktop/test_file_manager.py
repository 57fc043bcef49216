"""Part 19: the file manager. GNOME Files, running under Xvfb with the nautilus-python extension of
scripts/desktop, shows each file's sync state as an emblem and offers the download / remove download / keep
on this device actions in its context menu. The test drives the real Files with xdotool, reads what the
extension answered (UBIQUITYFS_NAUTILUS_LOG), and checks the screenshot's pixels for each emblem's colour.
The states and actions themselves are also checked against a mount without the window, through the
extension's own functions."""
import errno
import hashlib
import importlib.util
import os
import re
import shutil
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest

from conftest import CONTAINER, ROOT, attr, run, sync, wait_until
from ubiquitybench.harness import TimedOut

EXTENSION = ROOT / "scripts" / "desktop" / "ubiquityfs_nautilus.py"
EMBLEMS = ROOT / "scripts" / "desktop" / "emblems"
SHOTS_TO = os.environ.get("UBIQUITYFS_SCREENSHOTS_TO")  # docs/ to refresh file-manager.png and file-manager-menu.png


def extension():
    spec = importlib.util.spec_from_file_location("ubiquityfs_nautilus", EXTENSION)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def emblem_colour(state):
    """The disc colour of a state's emblem, as (r, g, b), read from its SVG."""
    name = extension().EMBLEMS[state]
    fill = re.search(r'<circle[^>]*fill="#([0-9a-f]{6})"', (EMBLEMS / f"emblem-{name}.svg").read_text()).group(1)
    return tuple(int(fill[i:i + 2], 16) for i in (0, 2, 4))


def test_the_extensions_states_and_actions_on_a_real_mount(stub, mount_factory):
    ext = extension()
    a = mount_factory(stub, "laptop")
    b = mount_factory(stub, "desktop")
    (b / "Documents" / "there.txt").write_text("from the desktop\n")
    sync(b)
    wait_until(lambda: (a / "Documents" / "there.txt").exists(), timeout=30, what="there.txt on the laptop")
    there = str(a / "Documents" / "there.txt")
    assert ext.state_of(ext.attributes(there)) == "notDownloaded"
    assert ext.actions_for(ext.attributes(there), False) == ["download", "pin"]
    assert ext.perform(there, "download") is None
    wait_until(lambda: ext.state_of(ext.attributes(there)) == "current", timeout=30, what="there.txt downloaded")
    assert ext.actions_for(ext.attributes(there), False) == ["evict", "pin"]
    assert ext.perform(there, "evict") is None
    assert attr(there, "downloadingStatus") == "notDownloaded"
    assert ext.perform(there, "pin") is None
    wait_until(lambda: attr(there, "downloadingStatus") == "current", timeout=30, what="the pinned file downloaded")
    assert ext.actions_for(ext.attributes(there), False) == ["unpin"]
    assert ext.perform(there, "unpin") is None and attr(there, "pinned") == "0"
    # What is not yet uploaded cannot be evicted: the refusal comes back as a sentence, nothing is lost.
    stub.stop()
    here = str(a / "Documents" / "here.txt")
    Path(here).write_text("only here so far\n")
    assert ext.state_of(ext.attributes(here)) == "uploading"
    assert "evict" not in ext.actions_for(ext.attributes(here), False)
    assert ext.perform(here, "evict") == f"Remove download: here.txt: {os.strerror(errno.EBUSY)}"
    assert Path(here).read_text() == "only here so far\n"
    # Outside a ubiquityfs mount the extension stays quiet.
    assert ext.attributes(str(ROOT / "README.md")) is None
    assert ext.actions_for(ext.attributes(str(a / "Documents")), True) == ["download", "evict", "pin"]


@pytest.fixture
def files_window(tmp_path):
    """Starts Xvfb, a session bus and GNOME Files with the extension from this tree; yields a function that
    opens a folder, and the extension's log file. Everything is stopped at the end."""
    for program in ("nautilus", "Xvfb", "xdotool", "import", "xdpyinfo"):
        if not shutil.which(program):
            pytest.skip(f"{program} is missing: run scripts/setup --desktop")
    if not list(Path("/usr/lib").glob("*/nautilus/extensions-4/libnautilus-python.so")):
        pytest.skip("nautilus-python is missing: run scripts/setup --desktop")
    home = tmp_path / "home"
    extensions = home / ".local" / "share" / "nautilus-python" / "extensions"
    extensions.mkdir(parents=True)
    (extensions / EXTENSION.name).symlink_to(EXTENSION)
    emblems = home / ".local" / "share" / "icons" / "hicolor" / "scalable" / "emblems"  # where an install puts them
    emblems.mkdir(parents=True)
    for icon in EMBLEMS.glob("*.svg"):
        (emblems / icon.name).symlink_to(icon)
    log = tmp_path / "extension.log"
    log.touch()
    read_fd, write_fd = os.pipe()
    xvfb_log = tmp_path / "xvfb.log"
    # -noreset: when its last client leaves, Xvfb would start over and write its display number again, into a
    # pipe nobody reads: it then ended ("Cannot write display number"), and Files found no display (the test
    # failed so about one run in two). The pipe stays open until the end all the same.
    xvfb = subprocess.Popen(["Xvfb", "-displayfd", str(write_fd), "-noreset", "-screen", "0", "1100x700x24",
                             "-nolisten", "tcp"],
                            pass_fds=(write_fd,), stdout=subprocess.DEVNULL, stderr=open(xvfb_log, "ab"))
    os.close(write_fd)
    display = ":" + os.read(read_fd, 16).decode().strip()
    # The display answers before anything uses it (xdpyinfo connects as GNOME Files will).
    wait_until(lambda: run("xdpyinfo", "-display", display, check=False).returncode == 0 or xvfb.poll() is not None,
               timeout=30, what=f"Xvfb on {display}")
    assert xvfb.poll() is None, f"Xvfb on {display} ended: {xvfb_log.read_text()[-800:]}"
    env = dict(os.environ, DISPLAY=display, HOME=str(home), XDG_DATA_HOME=str(home / ".local" / "share"),
               XDG_CONFIG_HOME=str(home / ".config"), XDG_CACHE_HOME=str(home / ".cache"),
               XDG_DATA_DIRS="/usr/share", XDG_RUNTIME_DIR=str(tmp_path), GSK_RENDERER="cairo",
               NO_AT_BRIDGE="1", GTK_A11Y="none", UBIQUITYFS_NAUTILUS_LOG=str(log), LANG="C.UTF-8")
    env.pop("DBUS_SESSION_BUS_ADDRESS", None)
    # nautilus-python's embedded Python finds its library through the first python3 on PATH: Debian's.
    env["PATH"] = "/usr/bin:/bin:" + env["PATH"]
    bus = run("dbus-daemon", "--session", "--fork", "--print-address=1", "--print-pid=1", env=env).stdout.split("\n")
    env["DBUS_SESSION_BUS_ADDRESS"] = bus[0]
    files = []

    def open_folder(folder):
        files.append(subprocess.Popen(["nautilus", "--new-window", str(folder)], env=env, cwd=tmp_path,
                                      stdout=open(tmp_path / "nautilus.log", "ab"), stderr=subprocess.STDOUT))
        return env

    yield open_folder, log
    for p in files:
        p.terminate()
    run("nautilus", "--quit", env=env, check=False, timeout=20)
    for p in files:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
    os.kill(int(bus[1]), 15)
    xvfb.terminate()
    xvfb.wait(timeout=10)
    os.close(read_fd)


def emblems_logged(log):
    """The latest state the extension gave each file, by file name."""
    states = {}
    for line in log.read_text().splitlines():
        parts = line.split(" ")
        if len(parts) >= 4 and parts[1] == "emblem":
            states[os.path.basename(" ".join(parts[2:-1]))] = parts[-1]
    return states


def pixels(shot):
    """The screenshot (a binary PPM) as its width and the (x, y, (r, g, b)) of each pixel."""
    data = shot.read_bytes()
    header = re.match(rb"P6\s+(\d+)\s+(\d+)\s+255\s", data)
    body = data[header.end():]
    return int(header.group(1)), zip(body[0::3], body[1::3], body[2::3])


def near(colour, target, tolerance=12):
    return all(abs(c - t) <= tolerance for c, t in zip(colour, target))


def pixels_of(shot, colour):
    """How many pixels of the screenshot are (nearly) `colour`."""
    _, rgb = pixels(shot)
    counts = Counter(rgb)
    return sum(n for c, n in counts.items() if near(c, colour))


def where_is(shot, colour):
    """The middle of the pixels of one colour in the screenshot: where that emblem is drawn."""
    width, rgb = pixels(shot)
    spots = [(i % width, i // width) for i, c in enumerate(rgb) if near(c, colour)]
    assert spots, "the emblem is not on screen"
    return sum(x for x, _ in spots) // len(spots), sum(y for _, y in spots) // len(spots)


def screenshot(env, path):
    run("import", "-window", "root", "-depth", "8", str(path), env=env)


def test_files_shows_each_state_as_an_emblem_and_its_menu_downloads(stub, mount_factory, files_window, tmp_path, request):
    open_folder, log = files_window
    a = mount_factory(stub, "laptop")
    b = mount_factory(stub, "desktop")
    docs_a, docs_b = a / "Documents", b / "Documents"
    # A conflict: both devices edit one file while the remote is away.
    (docs_b / "conflict.txt").write_text("first\n")
    for name, content in (("cloud.txt", b"only downloaded when asked\n"), ("error.txt", b"its copy on the remote breaks\n"),
                          ("downloading.zip", os.urandom(12 << 20))):
        (docs_b / name).write_bytes(content)
    sync(b)
    wait_until(lambda: (docs_a / "downloading.zip").exists() and (docs_a / "conflict.txt").exists(), timeout=30,
               what="the desktop's files on the laptop")
    (docs_a / "conflict.txt").read_text()
    stub.stop()
    (docs_a / "conflict.txt").write_text("laptop's edit\n")
    time.sleep(1.1)
    (docs_b / "conflict.txt").write_text("desktop's edit\n")
    stub.start()
    wait_until(lambda: attr(docs_a / "conflict.txt", "hasUnresolvedConflicts") == "1", timeout=40, what="the conflict")
    (docs_a / "current.txt").write_text("written and uploaded here\n")
    sync(a)
    stub.stop()
    stub.bandwidth = 64 << 10  # for the slow download below
    stub.start()
    # A broken copy on the remote: the download of error.txt fails, and says why.
    blob = stub.data / "blobs" / CONTAINER / hashlib.sha256(b"its copy on the remote breaks\n").hexdigest()
    blob.write_bytes(b"garbled\n")
    run("setfattr", "-n", "user.ubiquity.download", docs_a / "error.txt")
    wait_until(lambda: attr(docs_a / "error.txt", "downloadingError"), timeout=30, what="error.txt's downloadingError")
    # A slow download stays in flight for the rest of the test. (Its name says its type: Files reads the first
    # bytes of a file whose name does not, and that open would wait for the whole download.)
    run("setfattr", "-n", "user.ubiquity.download", docs_a / "downloading.zip")
    wait_until(lambda: attr(docs_a / "downloading.zip", "isDownloading") == "1", timeout=60, what="the download to start")
    # A log being written: what it holds is not uploaded yet.
    writer = subprocess.Popen(["sh", "-c", 'while :; do date; sleep 0.2; done > "$1"', "-", docs_a / "uploading.log"])
    request.addfinalizer(lambda: (writer.kill(), writer.wait()))
    wait_until(lambda: attr(docs_a / "uploading.log", "isUploaded") == "0", timeout=10, what="the log written")

    env = open_folder(docs_a)
    expected = {"cloud.txt": "notDownloaded", "downloading.zip": "downloading", "uploading.log": "uploading",
                "current.txt": "current", "conflict.txt": "conflict", "error.txt": "error"}
    wait_until(lambda: all(emblems_logged(log).get(n) == s for n, s in expected.items()), timeout=60,
               what="the extension's emblems")
    shot = tmp_path / "files.ppm"  # binary PPM: read without an image library

    def every_emblem_drawn():
        time.sleep(1)
        screenshot(env, shot)
        return all(pixels_of(shot, emblem_colour(s)) >= 20 for s in expected.values())

    wait_until(every_emblem_drawn, timeout=30, what="each emblem's colour on screen")
    if SHOTS_TO:
        run("import", "-window", "root", "-crop", "890x550+0+0", Path(SHOTS_TO) / "file-manager.png", env=env)

    # The context menu of the file that is not downloaded: right-click it, and choose "Download now".
    x, y = where_is(shot, emblem_colour("notDownloaded"))  # the emblem sits at the top right of its icon
    for attempt in range(3):  # xdotool's keys can reach the window before the menu takes them: then again
        run("xdotool", "mousemove", x - 40, y + 40, "click", "1", env=env)
        time.sleep(0.5)
        run("xdotool", "click", "3", env=env)
        wait_until(lambda: re.search(r" menu \S*cloud\.txt download,pin$", log.read_text(), re.M), timeout=15,
                   what="the menu's actions for cloud.txt")
        time.sleep(1.5)
        if SHOTS_TO and attempt == 0:
            run("import", "-window", "root", "-crop", "890x580+0+0", Path(SHOTS_TO) / "file-manager-menu.png", env=env)
        run("xdotool", "key", "--delay", "200", "Up", "Up", "Up", "Return", env=env)
        try:
            wait_until(lambda: " action " in log.read_text(), timeout=5, what="an action from the menu")
            break
        except TimedOut:
            screenshot(env, tmp_path / f"menu-{attempt}.ppm")
            run("xdotool", "key", "Escape", env=env)
    else:
        raise TimedOut(f"no action from the menu in 3 tries (screens in {tmp_path})")
    assert re.search(r" action \S*cloud\.txt download ok$", log.read_text(), re.M), log.read_text()[-600:]
    wait_until(lambda: attr(docs_a / "cloud.txt", "downloadingStatus") == "current", timeout=60,
               what="cloud.txt downloaded from the menu")
    assert (docs_a / "cloud.txt").read_text() == "only downloaded when asked\n"
    wait_until(lambda: emblems_logged(log).get("cloud.txt") == "current", timeout=30, what="cloud.txt's emblem updated")
