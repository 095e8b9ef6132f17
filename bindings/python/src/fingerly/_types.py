"""Typed results: dataclasses over the library's own JSON encoding."""
import warnings
from dataclasses import dataclass, field
from typing import Any, Optional

VERDICT_NAMES = ("virtualization", "container", "debugger", "instrumentation", "tampering", "mitm", "proxy",
                 "automation", "farm")


@dataclass(frozen=True)
class Reason:
    code: str
    confidence: str
    message: str

    @classmethod
    def from_json(cls, value):
        return cls(code=value.get("code", ""), confidence=value.get("confidence", ""), message=value.get("message", ""))


@dataclass(frozen=True)
class Verdict:
    value: bool
    confidence: str
    kind: Optional[str]
    reasons: tuple
    missing_evidence: tuple

    @classmethod
    def from_json(cls, value):
        return cls(value=bool(value.get("value", False)), confidence=value.get("confidence", "none"),
                   kind=value.get("kind"), reasons=tuple(Reason.from_json(r) for r in value.get("reasons", [])),
                   missing_evidence=tuple(value.get("missingEvidence", [])))


@dataclass(frozen=True)
class Verdicts:
    virtualization: Verdict
    container: Verdict
    debugger: Verdict
    instrumentation: Verdict
    tampering: Verdict
    mitm: Verdict
    proxy: Verdict
    automation: Verdict
    farm: Verdict

    @classmethod
    def from_json(cls, value):
        absent = {"value": False, "confidence": "none"}
        return cls(**{name: Verdict.from_json(value.get(name, absent)) for name in VERDICT_NAMES})


@dataclass(frozen=True)
class Trigger:
    signal: str
    group: str
    weight: int
    confidence: str

    @classmethod
    def from_json(cls, value):
        return cls(signal=value.get("signal", ""), group=value.get("group", ""), weight=value.get("weight", 0),
                   confidence=value.get("confidence", ""))


@dataclass(frozen=True)
class Environment:
    """What kind of machine this is, beside the verdicts: `hardened` is a VM whose CPUID denies the hypervisor that
    other evidence shows; `confidential` the memory-encryption technology of a VM guest (tdx, sev-snp, sev-es, sev)."""
    cloud: Optional[str]
    xen_dom0: bool
    hardened: bool
    confidential: Optional[str]

    @classmethod
    def from_json(cls, value):
        return cls(cloud=value.get("cloud"), xen_dom0=bool(value.get("xenDom0", False)),
                   hardened=bool(value.get("hardened", False)), confidential=value.get("confidential"))


@dataclass(frozen=True)
class IdentifyResult:
    """fingerly_identify's IdentifyResult; `raw` is the whole JSON document."""
    state: str
    request_id: str
    visitor_id: Optional[str]
    visitor_is_new: Optional[bool]
    visitor_confidence: Optional[int]
    identifiable: bool
    duplicate: bool
    suspect_score: Optional[int]
    suspect_level: Optional[str]
    triggers: tuple
    verdicts: Verdicts
    environment: Environment
    policy: str
    report: dict
    raw: dict = field(repr=False)

    @classmethod
    def from_json(cls, value):
        return cls(state=value["state"], request_id=value.get("requestId", ""), visitor_id=value.get("visitorId"),
                   visitor_is_new=value.get("visitorIsNew"), visitor_confidence=value.get("visitorConfidence"),
                   identifiable=bool(value.get("identifiable", False)), duplicate=bool(value.get("duplicate", False)),
                   suspect_score=value.get("suspectScore"), suspect_level=value.get("suspectLevel"),
                   triggers=tuple(Trigger.from_json(t) for t in value.get("triggers", [])),
                   verdicts=Verdicts.from_json(value.get("verdicts", {})),
                   environment=Environment.from_json(value.get("environment", {})), policy=value.get("policy", ""),
                   report=value.get("report", {}), raw=value)


@dataclass(frozen=True)
class IntegrityVerdicts:
    """The four verdicts an integrity check decides, named as in Verdicts."""
    debugger: Verdict
    tampering: Verdict
    instrumentation: Verdict
    automation: Verdict

    @classmethod
    def from_json(cls, value):
        return cls(**{name: Verdict.from_json(value[name]) for name in INTEGRITY_VERDICT_NAMES})


INTEGRITY_VERDICT_NAMES = ("debugger", "tampering", "instrumentation", "automation")


@dataclass(frozen=True)
class IntegrityResult:
    """fingerly_check_integrity's IntegrityResult: `verdicts.<name>` as in IdentifyResult.
    The verdicts at the top level (`result.debugger`) are the 0.1.0 shape, kept through 0.2 with a
    DeprecationWarning."""
    verdicts: IntegrityVerdicts
    report: dict = field(repr=False)

    @classmethod
    def from_json(cls, value):
        return cls(verdicts=IntegrityVerdicts.from_json(value), report=value.get("report", {}))

    def __getattr__(self, name):
        # Only reached for names the dataclass does not have.
        if name in INTEGRITY_VERDICT_NAMES:
            warnings.warn(f"IntegrityResult.{name} is deprecated; use IntegrityResult.verdicts.{name}",
                          DeprecationWarning, stacklevel=2)
            return getattr(self.verdicts, name)
        raise AttributeError(f"'IntegrityResult' object has no attribute {name!r}")


@dataclass(frozen=True)
class FlushResult:
    delivered: int
    dropped: int
    remaining: int
    last_error: Optional[Any]

    @classmethod
    def from_json(cls, value):
        return cls(delivered=value.get("delivered", 0), dropped=value.get("dropped", 0),
                   remaining=value.get("remaining", 0), last_error=value.get("lastError"))
