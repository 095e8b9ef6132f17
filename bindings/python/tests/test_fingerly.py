import json
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


def test_collect_and_check_integrity():
    client = fingerly.load(api_key=None, root=KVM_FIXTURE, tiers=("fast",))
    report = client.collect(tag="c")
    assert report["tag"] == "c" and report["probes"]
    integrity = client.check_integrity()
    assert isinstance(integrity, fingerly.IntegrityResult)
    assert isinstance(integrity.debugger, fingerly.Verdict)
    assert integrity.debugger.confidence in ("none", "low", "medium", "high")


def test_denied_consent_raises_consent_error_and_reads_nothing():
    client = fingerly.load(api_key=None, consent="denied")
    with pytest.raises(fingerly.ConsentError) as raised:
        client.identify(submit=False)
    assert "denied" in str(raised.value)
    client.set_consent("granted")
    assert client.identify(tiers=("fast",), submit=False).state == "collected"


def test_bad_options_raise_configuration_errors():
    with pytest.raises(fingerly.ConfigurationError, match="budgetMs"):
        fingerly.load(budget_ms=-1)
    with pytest.raises(fingerly.ConfigurationError, match="apiKey"):
        fingerly.load(api_key="fly_sk_us_production_acme_0123456789abcdefABCD")
    with pytest.raises(fingerly.ConfigurationError, match="consent"):
        fingerly.load().set_consent("maybe")
    with pytest.raises(fingerly.ConfigurationError, match="tier"):
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
