"""The C API of libfingerly.so.0 (include/fingerly.h) through ctypes."""
import ctypes
import ctypes.util
import os

CONSENT = 1
TRANSPORT = 2
CONFIGURATION = 3
INTERNAL = 4

TIER_BITS = {"fast": 1, "deferred": 2}


class Error(ctypes.Structure):
    """fingerly_error: int kind; int status; bool retryable; char message[256]."""
    _fields_ = [("kind", ctypes.c_int), ("status", ctypes.c_int), ("retryable", ctypes.c_bool),
                ("message", ctypes.c_char * 256)]


_Text = ctypes.POINTER(ctypes.c_char)
_Handle = ctypes.c_void_p
_ErrorPointer = ctypes.POINTER(Error)


def _open():
    # FINGERLY_LIBRARY names a file; otherwise the loader's search (ldconfig's cache, LD_LIBRARY_PATH).
    explicit = os.environ.get("FINGERLY_LIBRARY")
    candidates = [explicit] if explicit else ["libfingerly.so.0", ctypes.util.find_library("fingerly")]
    problems = []
    for candidate in candidates:
        if not candidate:
            continue
        try:
            return ctypes.CDLL(candidate)
        except OSError as error:
            problems.append(str(error))
    raise ImportError("cannot load libfingerly.so.0 (install it with scripts/install, or set FINGERLY_LIBRARY): "
                      + "; ".join(problems or ["not found"]))


library = _open()


def _declare(name, restype, *argtypes):
    function = getattr(library, name)
    function.restype = restype
    function.argtypes = list(argtypes)
    return function


load = _declare("fingerly_load", ctypes.c_int, ctypes.c_char_p, ctypes.POINTER(_Handle), _ErrorPointer)
close = _declare("fingerly_close", None, _Handle)
identify = _declare("fingerly_identify", ctypes.c_int, _Handle, ctypes.c_char_p, ctypes.c_uint, ctypes.c_bool,
                    ctypes.POINTER(_Text), _ErrorPointer)
collect = _declare("fingerly_collect", ctypes.c_int, _Handle, ctypes.c_char_p, ctypes.c_uint, ctypes.POINTER(_Text),
                   _ErrorPointer)
check_integrity = _declare("fingerly_check_integrity", ctypes.c_int, _Handle, ctypes.c_uint, ctypes.POINTER(_Text),
                           _ErrorPointer)
set_consent = _declare("fingerly_set_consent", ctypes.c_int, _Handle, ctypes.c_char_p, _ErrorPointer)
flush = _declare("fingerly_flush", ctypes.c_int, _Handle, ctypes.POINTER(_Text), _ErrorPointer)
clear_device_identity = _declare("fingerly_clear_device_identity", ctypes.c_int, _Handle, _ErrorPointer)
free = _declare("fingerly_free", None, _Text)
version = _declare("fingerly_version", ctypes.c_char_p)


def take_text(pointer):
    """The library's malloc'd string as Python text; the C copy is freed."""
    if not pointer:
        return None
    try:
        return ctypes.string_at(pointer).decode("utf-8")
    finally:
        free(pointer)


def new_text():
    return _Text()
