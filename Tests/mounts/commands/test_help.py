# Every --help answers with its usage and exit status 0, and runs nothing: the `ubiquityfs` command and each
# of its subcommands, the simulation binary, and the scripts that take arguments.
import os
from pathlib import Path

import pytest

from conftest import BIN, ROOT, run

SUBCOMMANDS = [
    [], ["mount"], ["unmount"], ["umount"], ["remote"], ["remote", "serve"], ["remote", "seed"], ["status"],
    ["evict"], ["download"], ["pin"], ["unpin"], ["sync"], ["pause"], ["resume"], ["usage"], ["delete-data"], ["check"], ["query"], ["kv"],
    ["kv", "get"], ["kv", "set"], ["kv", "delete"], ["kv", "list"], ["kv", "watch"], ["share"], ["share", "add"],
    ["share", "list"],
]
SCRIPTS = ["simulate", "demo", "test", "build", "setup", "bench", "measure-lazy-download", "install"]


def answers_usage(argv):
    proc = run(*argv, check=False, timeout=60)
    assert proc.returncode == 0, f"{argv}: exit {proc.returncode}: {proc.stderr}"
    assert "usage" in proc.stdout.lower(), f"{argv}: no usage line in {proc.stdout!r}"


@pytest.mark.parametrize("words", SUBCOMMANDS, ids=lambda w: " ".join(w) or "ubiquityfs")
def test_ubiquityfs_help_exits_zero(words):
    answers_usage([BIN, *words, "--help"])


def test_ubiquityfs_short_help_exits_zero():
    answers_usage([BIN, "-h"])


def test_simulate_binary_help_exits_zero():
    answers_usage([str(Path(BIN).parent / "ubiquity-simulate"), "--help"])


@pytest.mark.parametrize("script", SCRIPTS)
def test_script_help_exits_zero_and_runs_nothing(script, tmp_path):
    before = set(os.listdir("/tmp"))
    answers_usage([str(ROOT / "scripts" / script), "--help"])
    # measure-lazy-download writes /tmp/meas, demo mounts: a help that ran them would leave something.
    assert "meas" not in set(os.listdir("/tmp")) - before
