"""Text for the gateway's error messages: values named by their JSON type, control characters
shown escaped, and the one meaningful line of an actor's (Ray's) exception."""
from __future__ import annotations

import re

_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_NOT_A_REASON = ("Traceback", "File ", "ray::", "During handling", "The above exception")


def plain_text(text: str) -> str:
    """``text`` fit for an error message: ANSI escape sequences (terminal colours) removed,
    any other control character (a stray ESC from a client's path, say) shown escaped
    (``\\x1b``); line breaks stay (caret excerpts)."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", _ANSI.sub("", text))


def type_name(value) -> str:
    """The name of a value's type in messages: JSON's for null, objects and arrays, else
    Python's ("got int", "got array")."""
    return _TYPE_NAMES.get(type(value)) or type(value).__name__


_TYPE_NAMES = {type(None): "null", dict: "object", list: "array", tuple: "array"}


def short_reason(exc: BaseException, limit: int = 300) -> str:
    """``Type: first meaningful line`` of an exception, for an error message: the cause of a
    Ray task error (whose text is a colourised remote traceback), ANSI escapes stripped,
    traceback lines skipped."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, BaseException) and cause is not exc:
        exc = cause
    lines = [ln.strip() for ln in plain_text(str(exc)).splitlines()]
    line = next((ln for ln in lines if ln and not ln.startswith(_NOT_A_REASON)), "")
    line = line if len(line) <= limit else line[:limit - 3] + "..."
    return f"{type(exc).__name__}: {line}" if line else type(exc).__name__
