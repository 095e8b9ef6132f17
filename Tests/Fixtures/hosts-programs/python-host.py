"""A Python program that has loaded its own extension modules (with dlopen, as CPython does) before
it asks libfingerly through bindings/python. Run by HostProgramMatrixTests with FINGERLY_LIBRARY and
PYTHONPATH set; prints three lines:
    modules <JSON list of the extension-module files loaded>
    integrity <IntegrityResult JSON>   check_integrity(), the fast tier
    identify <IdentifyResult JSON>     identify(submit=False, tiers='fast')
"""
import decimal
import json
import sqlite3
import ssl
import sys

import fingerly
from matrix_results import integrity_json

# Use each module once, so their shared objects and the libraries they need are in use.
assert json.loads(json.dumps({"a": [1]})) == {"a": [1]}
assert ssl.create_default_context().verify_mode == ssl.CERT_REQUIRED
assert sqlite3.connect(":memory:").execute("select sqlite_version()").fetchone()[0]
assert decimal.Decimal("1.10") + decimal.Decimal("2.20") == decimal.Decimal("3.30")

extension_modules = sorted({module.__file__ for module in list(sys.modules.values())
                            if (getattr(module, "__file__", None) or "").endswith(".so")})
print("modules", json.dumps(extension_modules), flush=True)

client = fingerly.load(api_key=None)
print("integrity", json.dumps(integrity_json(client.check_integrity())), flush=True)
print("identify", json.dumps(client.identify(submit=False, tiers="fast").raw), flush=True)
