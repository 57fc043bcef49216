"""Part 15: the remote as a server exposed to others. Each test drives a real `ubiquityfs remote serve` with
curl, as an attacker holding a token (or none) would."""
import subprocess

from conftest import Stub


def status(stub, method, path, body=None):
    """The HTTP status curl gets for one request with the stub's token."""
    args = ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-X", method,
            "-H", "Authorization: Bearer " + stub.token]
    if body is not None:
        args += ["-H", "Content-Type: application/json", "--data-binary", body]
    return subprocess.run(args + [stub.url + path], capture_output=True, text=True, timeout=30).stdout


def test_the_test_routes_exist_only_with_test_routes(tmp_path):
    plain = Stub(tmp_path / "plain", test_routes=False).start()
    try:
        # Before Part 15 any token holder listed every blob of every container and armed failures of other
        # clients' requests.
        assert status(plain, "GET", "/v1/stats") == "404"
        assert status(plain, "POST", "/v1/faults", '{"failNext": 3, "status": 500}') == "404"
        assert status(plain, "GET", "/v1/health") == "200"
    finally:
        plain.stop()
    bench = Stub(tmp_path / "bench").start()  # the harness asks for them: --test-routes
    try:
        assert status(bench, "GET", "/v1/stats") == "200"
    finally:
        bench.stop()
