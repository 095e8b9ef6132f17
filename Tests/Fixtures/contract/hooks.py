"""Schemathesis hooks of OpenAPIContractTests: what docs/openapi.yaml states in words because
JSON Schema cannot (docs/api.md, Request body), applied to every generated identify request.

- The report's identifiers are HMACs of its identity components under the organization's name,
  its probe ids are distinct and its component summaries no more than its components: a
  generated report is given those, so a valid one is judged instead of refused as mismatched.
- Each request carries a fresh Idempotency-Key: a repeated key with another body is 422 by design.
- Requests are signed (RFC 9421) with a device key made for the run, through libcrypto, as every
  client signs: the server runs with its default, signatures required. A request whose headers
  were generated invalid keeps them unsigned, as generated.
"""
import base64
import collections.abc
import ctypes
import ctypes.util
import hashlib
import hmac
import json
import os
import time
import uuid

import re

import schemathesis
import yaml
from schemathesis.core.parameters import ParameterLocation

ORGANIZATION = os.environ["FINGERLY_CONTRACT_ORGANIZATION"]
PUBLIC_KEY = os.environ["FINGERLY_CONTRACT_PUBLIC_KEY"]
IDENTIFY_PATH = "/v1/identify"
with open(os.environ["FINGERLY_CONTRACT_SPEC"], encoding="utf-8") as spec:
    _parameters = yaml.safe_load(spec)["components"]["parameters"]
# The headers a signature covers or carries, with the patterns the document gives them.
SIGNED_HEADERS = {parameter["name"]: re.compile(parameter["schema"]["pattern"]) for parameter in _parameters.values()
                  if parameter["in"] == "header" and "pattern" in parameter["schema"]}

_crypto = ctypes.CDLL(ctypes.util.find_library("crypto") or "libcrypto.so.3")
_crypto.EVP_PKEY_new_raw_private_key.restype = ctypes.c_void_p
_crypto.EVP_PKEY_new_raw_private_key.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
_crypto.EVP_PKEY_get_raw_public_key.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_size_t)]
_crypto.EVP_MD_CTX_new.restype = ctypes.c_void_p
_crypto.EVP_MD_CTX_free.argtypes = [ctypes.c_void_p]
_crypto.EVP_DigestSignInit.argtypes = [ctypes.c_void_p] * 5
_crypto.EVP_DigestSign.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_size_t),
                                   ctypes.c_char_p, ctypes.c_size_t]
_EVP_PKEY_ED25519 = 1087


class Ed25519Key:
    def __init__(self):
        seed = os.urandom(32)
        self.handle = _crypto.EVP_PKEY_new_raw_private_key(_EVP_PKEY_ED25519, None, seed, len(seed))
        if not self.handle:
            raise RuntimeError("libcrypto refused an Ed25519 key")
        public = ctypes.create_string_buffer(32)
        length = ctypes.c_size_t(32)
        if _crypto.EVP_PKEY_get_raw_public_key(self.handle, public, ctypes.byref(length)) != 1:
            raise RuntimeError("libcrypto gave no public key")
        self.public = public.raw[: length.value]
        self.key_id = hashlib.sha256(self.public).hexdigest()

    def sign(self, message: bytes) -> bytes:
        context = _crypto.EVP_MD_CTX_new()
        try:
            signature = ctypes.create_string_buffer(64)
            length = ctypes.c_size_t(64)
            if (_crypto.EVP_DigestSignInit(context, None, None, None, self.handle) != 1
                    or _crypto.EVP_DigestSign(context, signature, ctypes.byref(length), message, len(message)) != 1):
                raise RuntimeError("libcrypto could not sign")
            return signature.raw[: length.value]
        finally:
            _crypto.EVP_MD_CTX_free(context)


DEVICE = Ed25519Key()
OLD_DEVICE = Ed25519Key()


def byte_sequence(data: bytes) -> str:
    return ":" + base64.b64encode(data).decode() + ":"


def identifier(scope: str, components: list) -> str | None:
    """The identifier a client derives: the world-readable components of the scope, each once, sorted."""
    parts = sorted({f"{c['name']}={c['hash']}" for c in components
                    if c.get("scope") == scope and c.get("worldReadable") is True})
    if not parts:
        return None
    message = (f"fingerly-{scope}-id-v1\n" + "\n".join(parts)).encode().strip(b" \t\n\r\x00").lower()
    key = f"fingerly-identifier-key-v1\norganization:{ORGANIZATION}".encode()
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def mend_report(report: dict) -> None:
    probes = report.get("probes")
    identity = report.get("identity")
    if not isinstance(probes, list) or not isinstance(identity, dict):
        return
    seen = set()
    components = []
    for index, probe in enumerate(probes):
        if not isinstance(probe, dict):
            return
        if isinstance(probe.get("id"), str):
            while probe["id"] in seen:
                probe["id"] = f"{probe['id']}-{index}"
            seen.add(probe["id"])
        if isinstance(probe.get("identityComponents"), list):
            components += [c for c in probe["identityComponents"] if isinstance(c, dict)]
    for field in ("hardwareComponents", "instanceComponents", "rootOnlyEvidence"):
        if isinstance(identity.get(field), list):
            del identity[field][len(components):]
    for scope in ("hardware", "instance"):
        derived = identifier(scope, components)
        if derived is None:
            identity.pop(f"{scope}Id", None)
        else:
            identity[f"{scope}Id"] = derived
            identity[f"{scope}IdVersion"] = 1


def sign(headers: dict, body: bytes) -> None:
    digest = "sha-256=" + byte_sequence(hashlib.sha256(body).digest())
    key = headers["Idempotency-Key"]
    created = int(time.time())
    parameters = (f'("@method" "@path" "content-digest" "idempotency-key");created={created};'
                  f'keyid="{DEVICE.key_id}";alg="ed25519"')
    base = "\n".join([
        '"@method": POST',
        f'"@path": {IDENTIFY_PATH}',
        f'"content-digest": {digest}',
        f'"idempotency-key": {key}',
        f'"@signature-params": {parameters}',
    ]).encode()
    headers["Content-Digest"] = digest
    headers["Fingerly-Device-Key"] = byte_sequence(DEVICE.public)
    headers["Signature-Input"] = "fingerly=" + parameters
    headers["Signature"] = "fingerly=" + byte_sequence(DEVICE.sign(base))
    if "Fingerly-Key-Rotation" in headers:
        statement = f"fingerly-key-rotation-v1\n{DEVICE.key_id}".encode()
        old_signature = byte_sequence(OLD_DEVICE.sign(statement))
        headers["Fingerly-Key-Rotation"] = byte_sequence(OLD_DEVICE.public) + ";sig=" + old_signature


@schemathesis.hook
def before_call(context, case, kwargs):
    # A case whose credentials were generated invalid is sent untouched: an edit would have
    # schemathesis judge it again, by its parameters alone, as a valid one.
    if (case.operation.path != IDENTIFY_PATH or not isinstance(case.headers, collections.abc.MutableMapping)
            or case.headers.get("Authorization") != f"Bearer {PUBLIC_KEY}"):
        return
    if not (case.meta and case.meta.is_negative_at(ParameterLocation.BODY)) and isinstance(case.body, dict):
        report = case.body.get("report")
        if isinstance(report, dict):
            mend_report(report)
    headers = case.headers
    # Headers generated outside their patterns, or without the key, go as generated and unsigned:
    # only valid values are replaced by other valid ones.
    if (not isinstance(headers, collections.abc.MutableMapping) or not isinstance(headers.get("Idempotency-Key"), str)
            or any(name in headers and not (isinstance(headers[name], str) and pattern.search(headers[name]))
                   for name, pattern in SIGNED_HEADERS.items())):
        return
    headers["Idempotency-Key"] = f'"{uuid.uuid4()}"'
    if isinstance(case.body, (bytes, bytearray)):
        body = bytes(case.body)
    elif case.body is None:
        body = b""
    else:
        # The bytes requests sends for `json=`: json.dumps with allow_nan=False, as UTF-8.
        try:
            body = json.dumps(case.body, allow_nan=False).encode()
        except (TypeError, ValueError):
            return
    sign(headers, body)
