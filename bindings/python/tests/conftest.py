import os
import tempfile

# Before the library is loaded: the installation secret goes to a directory of this run, never
# to /var/lib/fingerly.
os.environ.setdefault("STATE_DIRECTORY", tempfile.mkdtemp(prefix="fingerly-pytest-state-"))

REPOSITORY = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
KVM_FIXTURE = os.path.join(REPOSITORY, "Tests", "Fixtures", "hosts", "kvm-qemu")
