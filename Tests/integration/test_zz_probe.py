import subprocess, os, sys, time
from conftest import *  # noqa

def test_probe(stub, mount_factory):
    a = mount_factory(stub, "laptop")
    b = mount_factory(stub, "desktop")
    (a / "Documents" / "old.txt").write_text("x\n")
    sync(a)
    wait_until(lambda: (b / "Documents" / "old.txt").exists())
    os.listdir(b / "Documents"); (b / "Documents" / "old.txt").read_text()
    w = subprocess.Popen(["inotifywait", "-m", "-r", str(b.path / "Documents")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(1)
    (a / "Documents" / "new.txt").write_text("n\n")
    os.remove(a / "Documents" / "old.txt")
    sync(a)
    time.sleep(3)
    w.terminate()
    out, err = w.communicate()
    print("EVENTS", out, err)
    assert False
