import base64
import hashlib
import json
import os
import ssl
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

import fingerly
from conftest import KVM_FIXTURE


def test_the_one_liner_of_the_issue():
    value = fingerly.load(api_key=None).identify(submit=False).verdicts.virtualization.value
    assert isinstance(value, bool)


def test_identify_on_a_kvm_fixture_returns_typed_verdicts():
    with fingerly.load(api_key=None, root=KVM_FIXTURE, tiers=("fast",)) as client:
        result = client.identify(tag="checkout:1", submit=False)
    assert isinstance(result, fingerly.IdentifyResult)
    assert result.state == "collected"
    assert result.verdicts.virtualization.value is True
    # The fast tier decides from CPUID (KVMKVMKVM) at high confidence, as a run of both tiers does.
    assert result.verdicts.virtualization.kind == "kvm"
    assert result.verdicts.virtualization.confidence == "high"
    assert result.verdicts.virtualization.reasons[0].code
    assert result.report["tag"] == "checkout:1"
    assert result.report["tiers"] == ["fast"]
    assert any(trigger.group == "virtualization" for trigger in result.triggers)
    assert result.environment == fingerly.Environment(cloud=None, xen_dom0=False, hardened=False, confidential=None)


def test_a_vm_hiding_its_hypervisor_bit_is_hardened_in_the_environment():
    root = os.path.join(os.path.dirname(KVM_FIXTURE), "..", "environments", "cpuid-bit-cleared-kvm-leaf", "root")
    with fingerly.load(api_key=None, root=os.path.realpath(root), tiers=("fast",)) as client:
        result = client.identify(submit=False)
    assert result.verdicts.virtualization.kind == "kvm"
    assert result.environment.hardened is True
    assert result.environment.confidential is None


def test_collect_and_check_integrity():
    client = fingerly.load(api_key=None, root=KVM_FIXTURE, tiers=("fast",))
    report = client.collect(tag="c")
    assert report["tag"] == "c" and report["probes"]
    integrity = client.check_integrity()
    assert isinstance(integrity, fingerly.IntegrityResult)
    assert isinstance(integrity.verdicts.debugger, fingerly.Verdict)
    assert integrity.verdicts.debugger.confidence in ("none", "low", "medium", "high")


def test_denied_consent_raises_consent_error_and_reads_nothing():
    client = fingerly.load(api_key=None, consent="denied")
    with pytest.raises(fingerly.ConsentError) as raised:
        client.identify(submit=False)
    assert "denied" in str(raised.value)
    client.set_consent("granted")
    assert client.identify(tiers=("fast",), submit=False).state == "collected"


def test_bad_options_raise_configuration_errors():
    with pytest.raises(fingerly.ConfigurationError, match="^budget_ms: must be positive, got -1$"):
        fingerly.load(budget_ms=-1)
    with pytest.raises(fingerly.ConfigurationError, match="^api_key: a secret key"):
        fingerly.load(api_key="fly_sk_us_production_acme_0123456789abcdefABCD")
    with pytest.raises(fingerly.ConfigurationError, match="^consent: 'maybe' is not granted, pending or denied$"):
        fingerly.load().set_consent("maybe")
    with pytest.raises(fingerly.ConfigurationError, match="^tiers: unknown tier 'slow'; use fast or deferred$"):
        fingerly.load().identify(tiers=("slow",), submit=False)
    with pytest.raises(TypeError):
        fingerly.load(colour="blue")


class _Refusing(BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        body = json.dumps({"error": {"code": "invalid_key", "message": "unknown key"}}).encode()
        self.send_response(401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *arguments):
        pass


def test_a_401_is_a_transport_error_with_its_status(tmp_path):
    server = HTTPServer(("127.0.0.1", 0), _Refusing)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        client = fingerly.load(api_key="fly_pk_us_production_acme_0123456789abcdefABCD",
                               endpoint=f"http://127.0.0.1:{server.server_port}", tiers=("fast",),
                               state_directory=str(tmp_path))
        with pytest.raises(fingerly.TransportError) as raised:
            client.identify()
        assert raised.value.status == 401
        assert raised.value.retryable is False
        assert isinstance(raised.value, fingerly.FingerlyError)
    finally:
        server.shutdown()


def test_threads_share_one_instance():
    client = fingerly.load(api_key=None, root=KVM_FIXTURE, tiers=("fast",))
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda n: client.identify(tag=f"t{n}", submit=False), range(8)))
    assert [r.report["tag"] for r in results] == [f"t{n}" for n in range(8)]
    assert all(r.verdicts.virtualization.value for r in results)


def test_version_is_the_library_s():
    assert fingerly.library_version() == "0.1.0"


def test_a_nul_in_a_text_argument_is_refused_not_cut_short():
    client = fingerly.load(api_key=None, consent="denied", tiers=("fast",))
    with pytest.raises(fingerly.ConfigurationError, match="NUL"):
        client.set_consent("granted\0 by nobody")
    with pytest.raises(fingerly.ConsentError):
        client.identify(submit=False)
    client.set_consent("granted")
    with pytest.raises(fingerly.ConfigurationError, match="NUL"):
        client.identify(tag="checkout:1\0forged", submit=False)


class _Answering(BaseHTTPRequestHandler):
    status = 503

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        body = json.dumps({"error": {"code": "unavailable", "message": "try later"}}).encode()
        self.send_response(self.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *arguments):
        pass


@pytest.mark.parametrize("status,retryable", [(402, False), (503, True)])
def test_a_402_and_a_503_are_transport_errors_with_their_status(tmp_path, status, retryable):
    handler = type("Handler", (_Answering,), {"status": status})
    server = HTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        client = fingerly.load(api_key="fly_pk_us_production_acme_0123456789abcdefABCD",
                               endpoint=f"http://127.0.0.1:{server.server_port}", tiers=("fast",),
                               state_directory=str(tmp_path))
        with pytest.raises(fingerly.TransportError) as raised:
            client.identify()
        assert raised.value.status == status
        assert raised.value.retryable is retryable
    finally:
        server.shutdown()


@pytest.mark.parametrize("arguments,argument,text", [
    ({"consent": "maybe"}, "consent", "consent: 'maybe' is not granted, pending or denied"),
    ({"tiers": ("fast", "slow")}, "tiers", "tiers: unknown tier 'slow'; use fast or deferred"),
    ({"ignore": ("foo.bar",)}, "ignore", "ignore: unknown attribute(s) to ignore: foo.bar"),
    ({"budget_ms": "soon"}, "budget_ms", "budget_ms: must be a number"),
    ({"budget_ms": 1.5}, "budget_ms", "budget_ms: must be an integer, got 1.5"),
    ({"concurrency": 0}, "concurrency", "concurrency: must be at least 1, got 0"),
    ({"attempts": 11}, "attempts", "attempts: must be 1 to 10, got 11"),
    ({"deadline_ms": 0}, "deadline_ms", "deadline_ms: must be positive, got 0"),
    ({"ca_file": ""}, "ca_file", "ca_file: names no file"),
    ({"pins": ("nope",)}, "pins", "pins: pin 'nope' is not a SHA-256"),
    ({"policy_path": "relative.json"}, "policy_path", "policy_path: invalid policy"),
    ({"endpoint": "ftp://example.com"}, "endpoint", "endpoint: the scheme must be https or http"),
    ({"ignore": 5}, "ignore", "ignore: must be a list of strings, got int"),
    ({"ignore": "foo.bar"}, "ignore", "ignore: unknown attribute(s) to ignore: foo.bar"),
    ({"budget_ms": float("nan")}, "budget_ms", "budget_ms: must be an integer, got nan"),
    ({"deadline_ms": float("inf")}, "deadline_ms", "deadline_ms: must be an integer, got inf"),
    ({"budget_ms": 600_001}, "budget_ms", "budget_ms: must be at most 600000, got 600001"),
    ({"concurrency": 100_000}, "concurrency", "concurrency: must be at most 64, got 100000"),
    ({"default_source_timeout_ms": 10**9}, "default_source_timeout_ms", "default_source_timeout_ms: must be at most"),
    ({"state_directory": "/tmp/\udc80"}, "state_directory", "state_directory: '/tmp/\\udc80' is not valid Unicode"),
])
def test_configuration_errors_name_the_python_argument_not_a_field_of_the_library(arguments, argument, text):
    with pytest.raises(fingerly.ConfigurationError) as raised:
        fingerly.load(**arguments)
    assert raised.value.argument == argument
    assert str(raised.value).startswith(text), str(raised.value)
    for internal in ("config:", "schedule.", "submission.", "options.", "budgetMs", "stateDirectory", "[0]"):
        assert internal not in str(raised.value)


def test_a_root_that_is_not_a_directory_is_refused_as_the_cli_refuses_it(tmp_path):
    plain_file = tmp_path / "file"
    plain_file.write_text("")
    for root in ("/nonexistent", str(plain_file)):
        with pytest.raises(fingerly.ConfigurationError) as raised:
            fingerly.load(root=root)
        assert raised.value.argument == "root"
        assert str(raised.value) == f"root: {root}: not a directory"
    # Without consent nothing of the host is looked at, the root included.
    assert fingerly.load(root="/nonexistent", consent="denied") is not None


def test_a_state_directory_that_cannot_be_used_is_refused_and_checking_one_leaves_nothing(tmp_path):
    with pytest.raises(fingerly.ConfigurationError) as raised:
        fingerly.load(state_directory="/proc/nope")
    assert raised.value.argument == "state_directory"
    assert str(raised.value).startswith("state_directory: cannot be used: /proc/nope")
    open_to_all = tmp_path / "open"
    open_to_all.mkdir()
    open_to_all.chmod(0o777)
    with pytest.raises(fingerly.ConfigurationError,
                       match="^state_directory: .*writable by another user \\(mode 777\\)"):
        fingerly.load(state_directory=str(open_to_all))
    # Made when a run needs it, not by the check: an instance that never keeps state writes nothing.
    fresh = tmp_path / "made" / "here"
    fingerly.load(state_directory=str(fresh), api_key="fly_pk_us_production_acme_0123456789abcdefABCD")
    assert not (tmp_path / "made").exists()


def test_integrity_result_has_its_verdicts_under_verdicts_like_identify_result():
    client = fingerly.load(api_key=None, root=KVM_FIXTURE, tiers=("fast",))
    integrity = client.check_integrity()
    identified = client.identify(submit=False)
    assert isinstance(integrity.verdicts, fingerly.IntegrityVerdicts)
    for name in ("debugger", "tampering", "instrumentation", "automation"):
        assert isinstance(getattr(integrity.verdicts, name), fingerly.Verdict)
        assert type(getattr(identified.verdicts, name)) is type(getattr(integrity.verdicts, name))
    # The 0.1.0 shape still answers, with a warning saying where the verdict went.
    with pytest.warns(DeprecationWarning, match="verdicts.debugger"):
        assert integrity.debugger == integrity.verdicts.debugger
    with pytest.raises(AttributeError):
        integrity.virtualization


class _Counting(_Answering):
    status = 503
    requests = 0

    def do_POST(self):
        type(self).requests += 1
        super().do_POST()


def _counting_server():
    handler = type("Handler", (_Counting,), {"requests": 0})
    server = HTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, handler


@pytest.mark.parametrize("attempts", [1, 2])
def test_attempts_is_how_many_requests_a_failing_submission_makes(tmp_path, attempts):
    server, handler = _counting_server()
    try:
        client = fingerly.load(api_key="fly_pk_us_production_acme_0123456789abcdefABCD",
                               endpoint=f"http://127.0.0.1:{server.server_port}", tiers=("fast",),
                               state_directory=str(tmp_path), attempts=attempts, deadline_ms=10_000)
        with pytest.raises(fingerly.TransportError) as raised:
            client.identify()
        assert raised.value.status == 503 and raised.value.retryable
        assert handler.requests == attempts
    finally:
        server.shutdown()


def test_local_result_on_failure_returns_the_verdicts_instead_of_raising(tmp_path):
    server, handler = _counting_server()
    try:
        client = fingerly.load(api_key="fly_pk_us_production_acme_0123456789abcdefABCD",
                               endpoint=f"http://127.0.0.1:{server.server_port}", root=KVM_FIXTURE, tiers=("fast",),
                               state_directory=str(tmp_path), attempts=1, local_result_on_failure=True)
        result = client.identify()
        assert result.state == "unavailable"
        assert result.verdicts.virtualization.value is True
        assert handler.requests == 1
    finally:
        server.shutdown()


def _self_signed_https_server(directory):
    """An HTTPS server for 127.0.0.1 answering 401, its certificate (its own CA) and its key's SPKI pin."""
    certificate, key = directory / "server.pem", directory / "server.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(certificate)],
                   check=True, capture_output=True)
    public_key = subprocess.run(["openssl", "x509", "-in", str(certificate), "-noout", "-pubkey"],
                                check=True, capture_output=True).stdout
    der = subprocess.run(["openssl", "pkey", "-pubin", "-outform", "DER"], input=public_key,
                         check=True, capture_output=True).stdout
    pin = "sha256/" + base64.b64encode(hashlib.sha256(der).digest()).decode()
    server = HTTPServer(("127.0.0.1", 0), _Refusing)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(certificate), str(key))
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, str(certificate), pin


def test_ca_file_and_pins_decide_whom_the_submission_trusts(tmp_path):
    server, certificate, pin = _self_signed_https_server(tmp_path)
    endpoint = f"https://127.0.0.1:{server.server_port}"
    other_pin = "sha256/" + base64.b64encode(hashlib.sha256(b"another key").digest()).decode()

    def submitted(**trust):
        client = fingerly.load(api_key="fly_pk_us_production_acme_0123456789abcdefABCD", endpoint=endpoint,
                               tiers=("fast",), state_directory=str(tmp_path / "state"), attempts=1, **trust)
        with pytest.raises(fingerly.TransportError) as raised:
            client.identify()
        return raised.value

    try:
        # The system's CAs do not know this certificate; the CA file does, and the server's 401 comes through.
        untrusted = submitted()
        assert untrusted.status is None and not untrusted.retryable, str(untrusted)
        assert submitted(ca_file=certificate).status == 401
        assert submitted(ca_file=certificate, pins=[pin]).status == 401
        mismatch = submitted(ca_file=certificate, pins=[other_pin])
        assert mismatch.status is None and not mismatch.retryable
        assert "pin" in str(mismatch).lower(), str(mismatch)
    finally:
        server.shutdown()
