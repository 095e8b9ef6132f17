"""The binding's typed results back as the library's own JSON, so the Swift test decodes what a
Python caller sees with the library's own types."""
import dataclasses


def verdict_json(verdict):
    return {"value": verdict.value, "confidence": verdict.confidence, "kind": verdict.kind,
            "reasons": [dataclasses.asdict(reason) for reason in verdict.reasons],
            "missingEvidence": list(verdict.missing_evidence)}


def integrity_json(result):
    document = {name: verdict_json(getattr(result, name))
                for name in ("debugger", "tampering", "instrumentation", "automation")}
    document["report"] = result.report
    return document
