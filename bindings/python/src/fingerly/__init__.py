"""Fingerly for Linux from Python: a ctypes binding of libfingerly.so.0.

    import fingerly
    result = fingerly.load(api_key=None).identify(submit=False)
    print(result.verdicts.virtualization.value)
"""
import ctypes
import json

from . import _native
from ._types import FlushResult, IdentifyResult, IntegrityResult, Reason, Trigger, Verdict, Verdicts

__all__ = ["load", "Fingerly", "FingerlyError", "ConsentError", "TransportError", "ConfigurationError",
           "InternalError", "IdentifyResult", "IntegrityResult", "FlushResult", "Verdict", "Verdicts", "Reason",
           "Trigger", "library_version"]


class FingerlyError(Exception):
    """Every failure of the library; `kind` is fingerly_error's."""

    def __init__(self, message, kind=_native.INTERNAL):
        super().__init__(message)
        self.kind = kind


class ConsentError(FingerlyError):
    """Consent is not granted: nothing was read or sent."""


class TransportError(FingerlyError):
    """The report was not delivered. `status` is the HTTP status (None when no server answered);
    `retryable` says the report is queued and flush() may deliver it."""

    def __init__(self, message, status=None, retryable=False):
        super().__init__(message, _native.TRANSPORT)
        self.status = status
        self.retryable = retryable


class ConfigurationError(FingerlyError):
    """A bad option or argument."""


class InternalError(FingerlyError):
    """Anything else."""


def _raise(error):
    message = error.message.decode("utf-8", "replace")
    if error.kind == _native.CONSENT:
        raise ConsentError(message, error.kind)
    if error.kind == _native.TRANSPORT:
        raise TransportError(message, error.status or None, bool(error.retryable))
    if error.kind == _native.CONFIGURATION:
        raise ConfigurationError(message, error.kind)
    raise InternalError(message, error.kind)


def _tier_bits(tiers):
    if tiers is None:
        return 0
    if isinstance(tiers, str):
        tiers = (tiers,)
    bits = 0
    for tier in tiers:
        if tier not in _native.TIER_BITS:
            raise ConfigurationError(f"unknown tier {tier!r}; use 'fast' or 'deferred'", _native.CONFIGURATION)
        bits |= _native.TIER_BITS[tier]
    return bits


def _text(value):
    if value is None:
        return None
    text = str(value)
    # A C string ends at its first NUL: "granted\0x" would arrive as "granted", a tag cut short.
    if "\0" in text:
        raise ConfigurationError(f"{text!r} contains a NUL character", _native.CONFIGURATION)
    return text.encode("utf-8")


class Fingerly:
    """A loaded instance (a fingerly handle). Calls may come from several threads at once; each
    releases the GIL while the library works."""

    def __init__(self, config):
        self._handle = ctypes.c_void_p()
        error = _native.Error()
        if _native.load(json.dumps(config).encode("utf-8"), ctypes.byref(self._handle), ctypes.byref(error)) != 0:
            _raise(error)

    def close(self):
        handle, self._handle = self._handle, ctypes.c_void_p()
        if handle:
            _native.close(handle)

    def __del__(self):
        handle = getattr(self, "_handle", None)
        if handle:
            _native.close(handle)

    def __enter__(self):
        return self

    def __exit__(self, *exception):
        self.close()

    def _call_for_json(self, function, *arguments):
        if not self._handle:
            raise ConfigurationError("this instance is closed", _native.CONFIGURATION)
        output = _native.new_text()
        error = _native.Error()
        if function(self._handle, *arguments, ctypes.byref(output), ctypes.byref(error)) != 0:
            _native.take_text(output)
            _raise(error)
        return json.loads(_native.take_text(output))

    def identify(self, tag=None, tiers=None, submit=True):
        """Collects, judges and (with submit) submits; tiers None runs the configured ones."""
        return IdentifyResult.from_json(self._call_for_json(_native.identify, _text(tag), _tier_bits(tiers), bool(submit)))

    def collect(self, tag=None, tiers=None):
        """The signal report alone, as a dict."""
        return self._call_for_json(_native.collect, _text(tag), _tier_bits(tiers))

    def check_integrity(self, tiers=("fast",)):
        return IntegrityResult.from_json(self._call_for_json(_native.check_integrity, _tier_bits(tiers)))

    def flush(self):
        return FlushResult.from_json(self._call_for_json(_native.flush))

    def set_consent(self, consent):
        error = _native.Error()
        if _native.set_consent(self._handle, _text(consent), ctypes.byref(error)) != 0:
            _raise(error)

    def clear_device_identity(self):
        error = _native.Error()
        if _native.clear_device_identity(self._handle, ctypes.byref(error)) != 0:
            _raise(error)


def load(api_key=None, endpoint="", budget_ms=1200, consent="granted", tiers=("fast", "deferred"),
         state_directory=None, ignore=(), root="/", policy_path=None, **schedule):
    """Fingerly.load: checks the options and returns an instance; reads nothing of the host.
    Further schedule options (concurrency, default_source_timeout_ms, source_timeout_override_ms)
    go by keyword."""
    names = {"concurrency": "concurrency", "default_source_timeout_ms": "defaultSourceTimeoutMs",
             "source_timeout_override_ms": "sourceTimeoutOverrideMs"}
    unknown = sorted(set(schedule) - set(names))
    if isinstance(tiers, str):
        tiers = (tiers,)
    if unknown:
        raise TypeError(f"load() got unexpected keyword argument(s): {', '.join(unknown)}")
    config = {"apiKey": api_key, "endpoint": endpoint, "consent": consent,
              "schedule": {"budgetMs": budget_ms, "tiers": list(tiers),
                           **{names[key]: value for key, value in schedule.items()}},
              "ignore": list(ignore), "root": root}
    if state_directory is not None:
        config["stateDirectory"] = state_directory
    if policy_path is not None:
        config["policyPath"] = policy_path
    return Fingerly(config)


def library_version():
    return _native.version().decode("utf-8")
