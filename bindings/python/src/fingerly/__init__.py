"""Fingerly for Linux from Python: a ctypes binding of libfingerly.so.0.

    import fingerly
    result = fingerly.load(api_key=None).identify(submit=False)
    print(result.verdicts.virtualization.value)
"""
import ctypes
import json
import math

from . import _native
from ._types import (Environment, FlushResult, IdentifyResult, IntegrityResult, IntegrityVerdicts, Reason, Trigger,
                     Verdict, Verdicts)

__all__ = ["load", "Fingerly", "FingerlyError", "ConsentError", "TransportError", "ConfigurationError",
           "InternalError", "IdentifyResult", "Environment", "IntegrityResult", "IntegrityVerdicts", "FlushResult",
           "Verdict", "Verdicts", "Reason", "Trigger", "library_version"]


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
    """A bad option or argument: refused where the CLI refuses the same value. `argument` is the
    name of the keyword argument at fault (`root`, `consent`, `attempts`…), None when the message
    is about no single one; the message starts with it."""

    def __init__(self, message, kind=_native.CONFIGURATION, argument=None):
        super().__init__(message, kind)
        self.argument = argument


class InternalError(FingerlyError):
    """Anything else."""


# The members of the C configuration (fingerly_load's JSON), and of its errors, as the keyword
# arguments of load() name them.
_ARGUMENT_OF_MEMBER = {
    "apiKey": "api_key", "endpoint": "endpoint", "consent": "consent", "stateDirectory": "state_directory",
    "ignore": "ignore", "root": "root", "policyPath": "policy_path",
    "schedule.budgetMs": "budget_ms", "schedule.tiers": "tiers", "schedule.concurrency": "concurrency",
    "schedule.defaultSourceTimeoutMs": "default_source_timeout_ms",
    "schedule.sourceTimeoutOverrideMs": "source_timeout_override_ms",
    "submission.attempts": "attempts", "submission.deadlineMs": "deadline_ms",
    "submission.attemptTimeoutMs": "attempt_timeout_ms", "submission.caFile": "ca_file", "submission.pins": "pins",
    "submission.localResultOnFailure": "local_result_on_failure",
}


def _configuration_error(message):
    """The library's `member: reason` (the member maybe indexed, `schedule.tiers[0]`) with the member
    replaced by the argument of load() that set it."""
    member, separator, reason = message.partition(": ")
    argument = _ARGUMENT_OF_MEMBER.get(member.split("[", 1)[0]) if separator else None
    if argument is None:
        return ConfigurationError(message)
    return ConfigurationError(f"{argument}: {reason}", argument=argument)


def _raise(error):
    message = error.message.decode("utf-8", "replace")
    if error.kind == _native.CONSENT:
        raise ConsentError(message, error.kind)
    if error.kind == _native.TRANSPORT:
        raise TransportError(message, error.status or None, bool(error.retryable))
    if error.kind == _native.CONFIGURATION:
        raise _configuration_error(message)
    raise InternalError(message, error.kind)


def _tier_bits(tiers):
    if tiers is None:
        return 0
    if isinstance(tiers, str):
        tiers = (tiers,)
    bits = 0
    for tier in tiers:
        if tier not in _native.TIER_BITS:
            raise ConfigurationError(f"tiers: unknown tier {str(tier)!r}; use fast or deferred", argument="tiers")
        bits |= _native.TIER_BITS[tier]
    return bits


def _check_text(argument, value):
    """A text argument the library can take: a string of Unicode scalars (a lone surrogate, as
    os.fsdecode makes of undecodable bytes, has no UTF-8 form)."""
    if value is None or not isinstance(value, str):
        return
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ConfigurationError(f"{argument}: {value!r} is not valid Unicode text", argument=argument) from None


def _text(value, argument):
    if value is None:
        return None
    text = str(value)
    _check_text(argument, text)
    # A C string ends at its first NUL: "granted\0x" would arrive as "granted", a tag cut short.
    if "\0" in text:
        raise ConfigurationError(f"{argument}: {text!r} contains a NUL character", argument=argument)
    return text.encode("utf-8")


class Fingerly:
    """A loaded instance (a fingerly handle). Calls may come from several threads at once; each
    releases the GIL while the library works."""

    def __init__(self, config):
        self._handle = ctypes.c_void_p()
        error = _native.Error()
        if _native.load(json.dumps(config, allow_nan=False).encode("utf-8"), ctypes.byref(self._handle), ctypes.byref(error)) != 0:
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
            raise ConfigurationError("this instance is closed")
        output = _native.new_text()
        error = _native.Error()
        if function(self._handle, *arguments, ctypes.byref(output), ctypes.byref(error)) != 0:
            _native.take_text(output)
            _raise(error)
        return json.loads(_native.take_text(output))

    def identify(self, tag=None, tiers=None, submit=True):
        """Collects, judges and (with submit) submits; tiers None runs the configured ones."""
        return IdentifyResult.from_json(self._call_for_json(_native.identify, _text(tag, "tag"), _tier_bits(tiers),
                                                            bool(submit)))

    def collect(self, tag=None, tiers=None):
        """The signal report alone, as a dict."""
        return self._call_for_json(_native.collect, _text(tag, "tag"), _tier_bits(tiers))

    def check_integrity(self, tiers=("fast",)):
        return IntegrityResult.from_json(self._call_for_json(_native.check_integrity, _tier_bits(tiers)))

    def flush(self):
        return FlushResult.from_json(self._call_for_json(_native.flush))

    def set_consent(self, consent):
        error = _native.Error()
        if _native.set_consent(self._handle, _text(consent, "consent"), ctypes.byref(error)) != 0:
            _raise(error)

    def clear_device_identity(self):
        error = _native.Error()
        if _native.clear_device_identity(self._handle, ctypes.byref(error)) != 0:
            _raise(error)


def load(api_key=None, endpoint="", budget_ms=1200, consent="granted", tiers=("fast", "deferred"),
         state_directory=None, ignore=(), root="/", policy_path=None, *, ca_file=None, pins=(), attempts=None,
         deadline_ms=None, attempt_timeout_ms=None, local_result_on_failure=None, **schedule):
    """Fingerly.load: checks the options and returns an instance; reads nothing of the host but
    whether `root` is a directory (with consent granted), and makes `state_directory` when missing.
    Refuses what fingerly-identify refuses (ConfigurationError naming the argument): a root that
    is not a directory, a state directory that cannot be used.

    Submission, as the CLI's --ca-file, --api-pin, --attempts and --deadline-ms: `ca_file` (PEM CAs
    trusted instead of the system's), `pins` (SPKI SHA-256 pins of the API origin's key), `attempts`
    (1-10), `deadline_ms`, `attempt_timeout_ms`, `local_result_on_failure`. Further schedule options
    (concurrency, default_source_timeout_ms, source_timeout_override_ms) go by keyword."""
    names = {"concurrency": "concurrency", "default_source_timeout_ms": "defaultSourceTimeoutMs",
             "source_timeout_override_ms": "sourceTimeoutOverrideMs"}
    unknown = sorted(set(schedule) - set(names))
    if unknown:
        raise TypeError(f"load() got unexpected keyword argument(s): {', '.join(unknown)}")
    if isinstance(tiers, str):
        tiers = (tiers,)
    if isinstance(pins, str):
        pins = (pins,)
    if isinstance(ignore, str):
        ignore = (ignore,)
    for argument, value in (("tiers", tiers), ("ignore", ignore), ("pins", pins)):
        if isinstance(value, (bytes, dict)) or not hasattr(value, "__iter__"):
            raise ConfigurationError(f"{argument}: must be a list of strings, got {type(value).__name__}",
                                     argument=argument)
    texts = [("api_key", api_key), ("endpoint", endpoint), ("consent", consent), ("state_directory", state_directory),
             ("root", root), ("policy_path", policy_path), ("ca_file", ca_file)]
    texts += [(argument, item) for argument, items in (("tiers", tiers), ("ignore", ignore), ("pins", pins))
              for item in items]
    for argument, value in texts:
        _check_text(argument, value)
    numbers = [("budget_ms", budget_ms), ("attempts", attempts), ("deadline_ms", deadline_ms),
               ("attempt_timeout_ms", attempt_timeout_ms), *schedule.items()]
    for argument, value in numbers:
        # JSON has no NaN or infinity: without this the library would name its own member.
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigurationError(f"{argument}: must be an integer, got {value!r}", argument=argument)
    config = {"apiKey": api_key, "endpoint": endpoint, "consent": consent,
              "schedule": {"budgetMs": budget_ms, "tiers": list(tiers),
                           **{names[key]: value for key, value in schedule.items()}},
              "ignore": list(ignore), "root": root}
    if state_directory is not None:
        config["stateDirectory"] = state_directory
    if policy_path is not None:
        config["policyPath"] = policy_path
    submission = {"caFile": ca_file, "pins": list(pins) or None, "attempts": attempts, "deadlineMs": deadline_ms,
                  "attemptTimeoutMs": attempt_timeout_ms, "localResultOnFailure": local_result_on_failure}
    submission = {member: value for member, value in submission.items() if value is not None}
    if submission:
        config["submission"] = submission
    return Fingerly(config)


def library_version():
    return _native.version().decode("utf-8")
