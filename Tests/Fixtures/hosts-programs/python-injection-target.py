"""A running Python process checked twice, so a library can be injected into it in between. Run by
HostProgramMatrixTests:
    python-injection-target.py READY GO
checks its integrity (fast and deferred tiers), writes {"pid": …, "integrity": …} to READY (renamed
into place, so it is never read half-written), waits until the file GO exists (two minutes at
most), checks again and prints "integrity <IntegrityResult JSON>".
"""
import json
import os
import sys
import time

import fingerly
from matrix_results import integrity_json

ready, go = sys.argv[1], sys.argv[2]
client = fingerly.load(api_key=None)
before = integrity_json(client.check_integrity(tiers=("fast", "deferred")))
with open(ready + ".partial", "w") as partial:
    json.dump({"pid": os.getpid(), "integrity": before}, partial)
os.rename(ready + ".partial", ready)

deadline = time.monotonic() + 120
while not os.path.exists(go):
    if time.monotonic() > deadline:
        sys.exit("nobody created " + go)
    time.sleep(0.05)
print("integrity", json.dumps(integrity_json(client.check_integrity(tiers=("fast", "deferred")))), flush=True)
