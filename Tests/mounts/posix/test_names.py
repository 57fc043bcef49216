"""Names on a real mount: a name that is not valid UTF-8 is refused with EILSEQ (never rewritten, so two such
names never become one), looking one up finds nothing, valid names of up to 255 bytes work, and canonically
equivalent names (NFC and NFD) are two distinct files on every device."""
import errno
import os
import unicodedata


from conftest import BIN, run, wait_until, fails

BAD = [b"x\xfe", b"x\xff", b"caf\xe9", b"\xc0\xaf", b"\xed\xa0\x80"]  # stray bytes, overlong, a surrogate


def listing(d):
    return sorted(os.listdir(bytes(d)))


def test_names_that_are_not_utf8_are_refused_with_eilseq(d):
    dirb = bytes(d)
    for bad in BAD:
        fails(errno.EILSEQ, os.open, dirb + b"/" + bad, os.O_CREAT | os.O_WRONLY, 0o644)
        fails(errno.EILSEQ, os.mkdir, dirb + b"/" + bad)
    assert listing(d) == []
    (d / "ok.txt").write_text("ok\n")
    fails(errno.EILSEQ, os.rename, dirb + b"/ok.txt", dirb + b"/x\xfe")
    fails(errno.EILSEQ, os.symlink, "ok.txt", dirb + b"/x\xfe")
    fails(errno.EILSEQ, os.link, dirb + b"/ok.txt", dirb + b"/x\xfe")
    fails(errno.EILSEQ, os.mknod, dirb + b"/x\xfe")
    assert listing(d) == [b"ok.txt"]
    assert (d / "ok.txt").read_text() == "ok\n"


def test_a_name_that_is_not_utf8_cannot_exist(d):
    # Not even as the name it used to be rewritten to: U+FFFD in place of each bad byte.
    (d / "x\ufffd").write_text("replacement character\n")
    dirb = bytes(d)
    fails(errno.ENOENT, os.stat, dirb + b"/x\xfe")
    fails(errno.ENOENT, os.open, dirb + b"/x\xff", os.O_RDONLY)
    fails(errno.ENOENT, os.unlink, dirb + b"/x\xfe")
    fails(errno.ENOENT, os.rmdir, dirb + b"/x\xfe")
    fails(errno.ENOENT, os.rename, dirb + b"/x\xfe", dirb + b"/y")
    assert (d / "x\ufffd").read_text() == "replacement character\n"


def test_attribute_names_that_are_not_utf8_are_refused(d):
    f = d / "f.txt"
    f.write_text("f\n")
    fails(errno.EILSEQ, os.setxattr, f, b"user.x\xfe", b"v")
    os.setxattr(f, "user.x\ufffd", b"replacement")
    fails(errno.ENODATA, os.getxattr, f, b"user.x\xfe")
    fails(errno.ENODATA, os.removexattr, f, b"user.x\xff")
    assert os.getxattr(f, "user.x\ufffd") == b"replacement"


def test_touch_of_a_name_that_is_not_utf8_fails(d):
    p = run("sh", "-c", "touch \"$(printf 'x\\376')\"", cwd=d, check=False)
    assert p.returncode != 0
    assert "Invalid or incomplete multibyte or wide character" in p.stderr
    assert listing(d) == []


def test_long_names_up_to_255_bytes(d):
    name = "\u20ac" * 85  # 255 bytes of three-byte characters
    assert len(name.encode()) == 255
    (d / name).write_text("euro\n")
    assert os.listdir(d) == [name]
    assert (d / name).read_text() == "euro\n"
    os.mkdir(d / ("\u00e9" * 127 + "x"))  # 255 bytes of two-byte characters and one ASCII byte
    fails(errno.ENAMETOOLONG, os.open, d / ("\u20ac" * 85 + "x"), os.O_CREAT | os.O_WRONLY, 0o644)
    fails(errno.ENAMETOOLONG, os.mkdir, d / ("a" * 256))
    fails(errno.ENAMETOOLONG, os.rename, d / name, d / ("b" * 256))
    fails(errno.ENAMETOOLONG, os.stat, d / ("\u00e9" * 128))
    assert (d / name).read_text() == "euro\n"


def test_nfc_and_nfd_names_are_two_files_on_both_devices(stub, mount_factory):
    nfc, nfd = "caf\u00e9.txt", "cafe\u0301.txt"
    assert unicodedata.normalize("NFC", nfd) == nfc and nfc.encode() != nfd.encode()
    a = mount_factory(stub, device="a")
    b = mount_factory(stub, device="b")
    (a / "Documents" / nfc).write_text("composed\n")
    (a / "Documents" / nfd).write_text("decomposed\n")
    assert sorted(os.listdir(a / "Documents")) == sorted([nfc, nfd])
    run(BIN, "sync", "--wait", a.path, timeout=60)
    wait_until(lambda: sorted(os.listdir(b / "Documents")) == sorted([nfc, nfd]), timeout=20,
               what="both names on b")
    assert (b / "Documents" / nfc).read_text() == "composed\n"
    assert (b / "Documents" / nfd).read_text() == "decomposed\n"
    os.rename(b / "Documents" / nfd, b / "Documents" / "plain.txt")
    wait_until(lambda: sorted(os.listdir(a / "Documents")) == sorted([nfc, "plain.txt"]), timeout=20,
               what="the rename on a")
    assert (a / "Documents" / nfc).read_text() == "composed\n"
