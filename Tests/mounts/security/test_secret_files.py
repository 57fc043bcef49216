"""Part 21 point 5: the remote's secret files (the TLS key, the S3 credentials) are refused, in one line and
before anything is served, when another user owns them or others may read them, as the token and password
files already were."""
import os
import pwd

import pytest

from conftest import BIN, certificate, run

NOBODY = pwd.getpwnam("nobody").pw_uid


def serve(tmp_path, *args):
    """`remote serve` on a fresh data folder, expected to refuse: its CompletedProcess."""
    return run(BIN, "remote", "serve", "--data", tmp_path / "remote", "--listen", "127.0.0.1:0", *args,
               check=False, timeout=20)


def refused_in_one_line(p, *words):
    lines = p.stderr.strip().splitlines()
    return p.returncode != 0 and len(lines) == 1 and all(w in lines[0] for w in words)


@pytest.mark.parametrize("fault", ["readable", "owned"])
def test_a_tls_key_others_may_read_or_own_is_refused(tmp_path, fault):
    cert, key = certificate(tmp_path)
    if fault == "readable":
        key.chmod(0o644)  # before Part 21 the server ran with it
        p = serve(tmp_path, "--tls-cert", cert, "--tls-key", key)
        assert refused_in_one_line(p, "TLS key", "chmod 600"), p.stderr
    else:
        os.chown(key, NOBODY, -1)
        p = serve(tmp_path, "--tls-cert", cert, "--tls-key", key)
        assert refused_in_one_line(p, "TLS key", "another user"), p.stderr
    assert not (tmp_path / "remote" / "endpoint").exists()


def test_s3_credentials_others_may_read_are_refused(tmp_path):
    credentials = tmp_path / "credentials"
    credentials.write_text("AWS_ACCESS_KEY_ID=k\nAWS_SECRET_ACCESS_KEY=s\n")
    credentials.chmod(0o644)  # before Part 21 the server went on to the bucket with it
    p = serve(tmp_path, "--blobs", "s3://bucket?endpoint=http://127.0.0.1:9", "--s3-credentials", credentials)
    assert refused_in_one_line(p, "S3 credentials", "chmod 600"), p.stderr
    credentials.chmod(0o600)
    os.chown(credentials, NOBODY, -1)
    p = serve(tmp_path, "--blobs", "s3://bucket?endpoint=http://127.0.0.1:9", "--s3-credentials", credentials)
    assert refused_in_one_line(p, "S3 credentials", "another user"), p.stderr
