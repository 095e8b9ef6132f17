"""Reads JSON bodies, one a line, and prints for each whether docs/openapi.yaml's IdentifyRequest
schema accepts it ("valid" or "invalid"), with the date-time format checked: OpenAPIContractTests
compares that with what the server answers."""
import json
import sys

import jsonschema
import yaml

with open(sys.argv[1], encoding="utf-8") as spec:
    document = yaml.safe_load(spec)
schema = {"$ref": "#/components/schemas/IdentifyRequest", "components": document["components"]}
validator = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
for line in sys.stdin:
    print("valid" if validator.is_valid(json.loads(line)) else "invalid", flush=True)
