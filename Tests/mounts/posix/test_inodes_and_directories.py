"""Part 20, point 1 and the directory points of 3: the real kernel. An item's inode number (`st_ino`, and `d_ino`
in listings) is its own: the same after the kernel forgets the inode (echo 2 > /proc/sys/vm/drop_caches, as
memory pressure does), after renames, evictions and remounts; GNU tar, git and find, which rely on it, work
while the kernel drops its caches; and a directory handle read again from its start (rewinddir) sees the folder
as it is then (xfstests generic/471)."""
import os
import tarfile

from conftest import BIN, dropping_caches, forget_inodes, run, sync, wait_until


def numbers(*paths):
    """`stat -c %i` of each path."""
    return run("stat", "-c", "%i", *paths).stdout.split()


def listed_numbers(folder):
    """The inode number of each name as `ls -i` lists it (read from the listing's d_ino, no stat)."""
    out = run("ls", "-i", "-1", "-U", folder).stdout.split("\n")
    return {line.split(None, 1)[1]: line.split(None, 1)[0] for line in out if line.strip()}


def test_an_items_inode_number_is_its_own_across_forgets_renames_evictions_and_remounts(stub, mount_factory):
    m = mount_factory(stub)
    d = m / "Documents" / "d"
    d.mkdir()
    (d / "f").write_text("x\n")
    (d / "g").write_text("y\n")
    before = numbers(d, d / "f", d / "g")
    assert len(set(before)) == 3
    forget_inodes()
    assert numbers(d, d / "f", d / "g") == before
    assert listed_numbers(d) == {"f": before[1], "g": before[2]}

    run("mv", d / "g", d / "h")
    run("mv", d, m / "Documents" / "e")
    e = m / "Documents" / "e"
    forget_inodes()
    assert numbers(e, e / "f", e / "h") == before
    sync(m)
    run(BIN, "evict", e / "f")
    forget_inodes()
    assert numbers(e / "f") == before[1:2]
    assert (e / "f").read_text() == "x\n"
    assert numbers(e / "f") == before[1:2]

    m.unmount()
    m.mount()
    assert numbers(e, e / "f", e / "h") == before
    assert listed_numbers(e) == {"f": before[1], "h": before[2]}
    # find -inum, with the number taken before the kernel forgot the file (find -samefile does the same).
    ino = before[2]
    forget_inodes()
    assert run("find", m / "Documents", "-inum", ino).stdout.split() == [str(e / "h")]


def test_listings_show_each_entrys_own_inode_number(stub, mount_factory):
    m = mount_factory(stub)
    d = m / "Documents" / "many"
    d.mkdir()
    for i in range(50):
        (d / f"n{i}").write_text(str(i))
    forget_inodes()
    listed = listed_numbers(d)
    assert len(listed) == 50
    forget_inodes()  # the numbers listed, then the names looked up anew
    for name, number in listed.items():
        assert numbers(d / name) == [number], name
    # Python's os.scandir reads d_ino the same way; `.` in a listing is the folder itself.
    assert {e.name: str(e.inode()) for e in os.scandir(d)} == listed
    dots = run("ls", "-i", "-a", "-1", "-U", d).stdout.split("\n")
    assert [line.split()[0] for line in dots if line.split()[1:] == ["."]] == numbers(d)


def make_archive(tmp_path):
    """The archive of the report: ./d/, ./d/link -> ../x, ./x and a 2 MiB ./zz, made outside the mount."""
    src = tmp_path / "src"
    (src / "d").mkdir(parents=True)
    (src / "x").write_text("x\n")
    os.symlink("../x", src / "d" / "link")
    (src / "zz").write_bytes(os.urandom(2 << 20))
    (src / "d").chmod(0o750)
    archive = tmp_path / "t.tar"
    run("tar", "cf", archive, "-C", src, "./d", "./x", "./zz")
    return archive


def test_tar_extracts_links_and_folder_modes_while_the_kernel_forgets_inodes(stub, mount_factory, tmp_path):
    m = mount_factory(stub)
    archive = make_archive(tmp_path)
    for attempt in range(3):
        t = m / "Documents" / f"t{attempt}"
        t.mkdir()
        # tar drops the caches between its records: between making the link's placeholder and the link, and
        # between making `d` and setting its mode at the end (it checks both by device and inode number).
        p = run("tar", "xf", archive, "-C", t, "--checkpoint=1",
                "--checkpoint-action=exec=sh -c 'echo 2 >/proc/sys/vm/drop_caches'", check=False, timeout=120)
        assert p.returncode == 0, p.stderr
        assert os.readlink(t / "d" / "link") == "../x"
        assert oct((t / "d").stat().st_mode & 0o7777) == oct(0o750)
        assert run("tar", "-d", "-f", archive, "-C", t, check=False).returncode == 0
    sync(m)
    # No empty mode-000 placeholder reached the remote in place of the link.
    with tarfile.open(archive) as tf:
        assert tf.getmember("./d/link").issym()


def test_git_sees_nothing_changed_after_the_kernel_forgets_inodes(stub, mount_factory):
    m = mount_factory(stub)
    repo = m / "Documents" / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    run(*git, "init", "-q")
    for i in range(40):
        (repo / f"f{i}.txt").write_text(f"line {i}\n")
    run(*git, "add", ".")
    run(*git, "commit", "-q", "-m", "files")
    assert run(*git, "diff-files", "--name-only").stdout == ""
    forget_inodes()
    # Without the refresh `git status` does: each file whose stat data changed (its inode number) is listed.
    assert run(*git, "diff-files", "--name-only").stdout == ""
    with dropping_caches(0.2):
        for _ in range(5):
            assert run(*git, "diff-files", "--name-only").stdout == ""
            assert run(*git, "status", "--porcelain").stdout == ""


def test_rsync_and_du_agree_while_the_kernel_forgets_inodes(stub, mount_factory, tmp_path):
    m = mount_factory(stub)
    src = tmp_path / "tree"
    for i in range(6):
        (src / f"s{i}").mkdir(parents=True)
        for j in range(20):
            (src / f"s{i}" / f"f{j}").write_bytes(os.urandom(1000 + i * j))
    os.symlink("s0/f0", src / "link")
    dst, back = m / "Documents" / "tree", tmp_path / "back"
    with dropping_caches():
        run("rsync", "-aH", f"{src}/", f"{dst}/", timeout=120)
        run("rsync", "-aH", f"{dst}/", f"{back}/", timeout=120)
        apparent = run("du", "-s", "--apparent-size", "-B1", dst).stdout.split()[0]
    assert run("diff", "-r", "--no-dereference", src, back, check=False).returncode == 0
    assert os.readlink(back / "link") == "s0/f0"
    assert apparent == run("du", "-s", "--apparent-size", "-B1", src).stdout.split()[0]


def test_rewinddir_shows_entries_made_and_removed_since_the_folder_was_opened(stub, mount_factory):
    """xfstests generic/471 and generic/637: a directory handle read again from its start sees the folder as
    it is, not as it was at opendir."""
    m = mount_factory(stub)
    rw = m / "Documents" / "rw"
    rw.mkdir()
    (rw / "old").write_text("")
    script = ('opendir D, $ARGV[0] or die; open F, ">$ARGV[0]/new" or die; close F; unlink "$ARGV[0]/old" or die;'
              ' rewinddir D; print join(",", sort grep {!/^\\./} readdir D)')
    assert run("perl", "-e", script, rw).stdout == "new"
    # After reading it through once as well.
    script = ('opendir D, $ARGV[0] or die; my @first = readdir D; open F, ">$ARGV[0]/newer" or die; close F;'
              ' rewinddir D; print join(",", sort grep {!/^\\./} readdir D)')
    assert run("perl", "-e", script, rw).stdout == "new,newer"


FSTAT_AFTER = """
import os, sys
os.chdir(sys.argv[1])
os.mkdir("e"); os.mkdir("a"); os.mkdir("b")
open("f", "w").close(); open("g", "w").close()
fd = os.open("e", os.O_RDONLY); os.rmdir("e")
print(os.fstat(fd).st_nlink, os.path.exists("e"))
fd = os.open("b", os.O_RDONLY); os.rename("a", "b")
st = os.fstat(fd)
print(st.st_nlink, oct(st.st_mode))
fd = os.open("g", os.O_RDONLY); os.rename("f", "g")
print(os.fstat(fd).st_nlink)
"""


def test_fstat_of_an_open_folder_after_it_was_removed_or_renamed_over(stub, mount_factory):
    """xfstests generic/035: fstat(2) through a descriptor still open on a folder that rmdir or a rename over
    it removed answers with link count 0, as ext4 does, not ENOENT (files already did)."""
    m = mount_factory(stub)
    p = run("python3", "-c", FSTAT_AFTER, m / "Documents", check=False)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split("\n")[:3] == ["0 False", "0 0o40755", "0"]


SEEKDIR = r'''
opendir D, $ARGV[0] or die;
my (@at, @names);
while (1) { my $t = telldir D; my $n = readdir D; last unless defined $n; push @at, $t; push @names, $n; }
my $bad = 0;
for my $k (reverse 0 .. $#at) { seekdir D, $at[$k]; my $n = readdir D; $bad++ if $n ne $names[$k]; }
print scalar(@names), " ", $bad;
'''


def test_seekdir_to_each_telldir_position_reads_the_same_entry(stub, mount_factory):
    """xfstests generic/676: every position telldir(3) gave, sought again with seekdir(3), reads the entry it
    read the first time (a folder of 1,000 names: several pages of the kernel's readdir)."""
    m = mount_factory(stub)
    d = m / "Documents" / "many"
    d.mkdir()
    for i in range(1000):
        (d / f"name-{i:04d}-{'x' * (i % 40)}").write_text("")
    forget_inodes()
    assert run("perl", "-e", SEEKDIR, d).stdout == "1002 0"


MMAP_WRITE = """
import mmap, os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
m = mmap.mmap(fd, 4096)
os.stat(sys.argv[1])  # the attributes cached while it is open, as a program that looks at it has them
m[0:4] = b"bbbb"
m.flush()  # msync(MS_SYNC)
m.close()
os.close(fd)
"""


def test_a_write_through_mmap_shows_its_mtime_once_the_file_is_closed(stub, mount_factory):
    """xfstests generic/080 and 215: mtime and ctime move on with a write through a shared mapping. Through FUSE
    passthrough the kernel serves such writes itself and showed the times it had cached until its attribute
    timeout (10 s) ran out; now they show once the file is closed (the daemon records the writes and has the
    kernel ask again)."""
    m = mount_factory(stub)
    f = m / "Documents" / "mapped"
    f.write_bytes(b"a" * 4096)
    os.utime(f, (1_600_000_000, 1_600_000_000))
    before = os.stat(f)
    run("python3", "-c", MMAP_WRITE, f)
    wait_until(lambda: os.stat(f).st_mtime_ns > before.st_mtime_ns and os.stat(f).st_ctime_ns > before.st_ctime_ns,
               timeout=3, interval=0.05, what="the new mtime and ctime, well within the attribute timeout")
    assert f.read_bytes()[:5] == b"bbbba"


def test_times_far_in_the_past_and_future_are_kept_or_held_at_the_range_end(stub, mount_factory):
    """xfstests generic/634: `touch -d` of a date after 2262 ended the daemon (its nanoseconds overflowed 64
    bits; every later request got ENOTCONN). Such a time is held at the end of the range kept (2262), as a file
    system holds a time beyond the range it can store; one before 1970 is kept as it is (it showed as 1970)."""
    m = mount_factory(stub)
    f = m / "Documents" / "f"
    f.write_text("x\n")
    run("touch", "-d", "1960-01-02 03:04:05 UTC", f)
    assert os.stat(f).st_mtime == -315521755
    p = run("touch", "-d", "2514-05-30 01:53:03 UTC", f, check=False)
    assert p.returncode == 0, p.stderr
    assert 9_200_000_000 < os.stat(f).st_mtime < 9_223_372_037
    run("touch", "-d", "@-9999999999999", f)
    assert os.stat(f).st_mtime <= -2**31  # held at a range's end (the kernel's for FUSE, here)
    (m / "Documents" / "g").write_text("the mount still answers\n")
    sync(m)
    assert run("getfattr", "-n", "user.ubiquity.isUploaded", "--only-values", f).stdout == "1"
