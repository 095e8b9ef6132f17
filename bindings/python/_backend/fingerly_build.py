"""A PEP 517 backend for a pure-Python package: it zips src/ into a wheel.

pip's build isolation installs a backend's requirements from an index; this one needs none,
so installing the package needs no network.
"""
import base64
import hashlib
import os
import tomllib
import zipfile

_HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_SOURCES = os.path.join(_HERE, "src")


def _project():
    with open(os.path.join(_HERE, "pyproject.toml"), "rb") as file:
        project = tomllib.load(file)["project"]
    return project["name"], project["version"], project


def _dist_info_name():
    name, version, _ = _project()
    return f"{name}-{version}.dist-info"


def _metadata():
    name, version, project = _project()
    return (f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
            f"Summary: {project['description']}\nRequires-Python: {project['requires-python']}\n")


_WHEEL = "Wheel-Version: 1.0\nGenerator: fingerly_build\nRoot-Is-Purelib: true\nTag: py3-none-any\n"


def _record_line(path, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def get_requires_for_build_wheel(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    directory = os.path.join(metadata_directory, _dist_info_name())
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "METADATA"), "w", encoding="utf-8") as file:
        file.write(_metadata())
    with open(os.path.join(directory, "WHEEL"), "w", encoding="utf-8") as file:
        file.write(_WHEEL)
    return _dist_info_name()


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    name, version, _ = _project()
    wheel_name = f"{name}-{version}-py3-none-any.whl"
    dist_info = _dist_info_name()
    records = []
    with zipfile.ZipFile(os.path.join(wheel_directory, wheel_name), "w", zipfile.ZIP_DEFLATED) as wheel:
        def add(path, data):
            wheel.writestr(path, data)
            records.append(_record_line(path, data))

        for directory, subdirectories, files in os.walk(_SOURCES):
            subdirectories[:] = sorted(d for d in subdirectories if d != "__pycache__")
            for file_name in sorted(files):
                if not file_name.endswith(".py"):
                    continue
                full = os.path.join(directory, file_name)
                with open(full, "rb") as file:
                    add(os.path.relpath(full, _SOURCES).replace(os.sep, "/"), file.read())
        add(f"{dist_info}/METADATA", _metadata().encode())
        add(f"{dist_info}/WHEEL", _WHEEL.encode())
        record = "\n".join(records + [f"{dist_info}/RECORD,,"]) + "\n"
        wheel.writestr(f"{dist_info}/RECORD", record)
    return wheel_name
