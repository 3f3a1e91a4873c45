"""Why a role stopped, in its own words: the line of its log that says so, for the
supervisor's messages (``shard 0 did not start: alpha must be ...``) instead of a bare
"see the log"."""

from __future__ import annotations

import re
from pathlib import Path

# How much of a log's end is read: a traceback's last line is within it.
TAIL_BYTES = 16_384
# What the logging format puts before a logged line's own words.
_LOG_PREFIX = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ [A-Z]+ [\w.]+: ")
# A traceback's last line (``ValueError: ...``), click's usage error, a logged error.
_ERROR_LINE = re.compile(
    r"^(?:[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt)\b.*"
    r"|Error: .*|.*\b(?:ERROR|CRITICAL)\b.*)$"
)


def last_error_line(log_path: Path) -> str | None:
    """The last line of ``log_path`` that reports an error (a traceback's exception line,
    click's ``Error:`` line, a logged ERROR); else its last non-empty line; None when the
    log is missing or empty."""
    try:
        with log_path.open("rb") as log:
            log.seek(0, 2)
            log.seek(max(0, log.tell() - TAIL_BYTES))
            text = log.read().decode("utf-8", "replace")
    except OSError:
        return None
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for position in range(len(lines) - 1, -1, -1):
        if _ERROR_LINE.match(lines[position]):
            # A ConfigError lists its problems on the lines below its heading.
            items = []
            for line in lines[position + 1 :]:
                if not line.startswith("- "):
                    break
                items.append(line[2:])
            line = _LOG_PREFIX.sub("", lines[position])
            return " ".join([line, "; ".join(items)]) if items else line
    return lines[-1] if lines else None


def role_failure(what: str, log_path: Path) -> str:
    """``what`` (``shard 0 did not start``) with the role's own reason and its log."""
    reason = last_error_line(log_path)
    return f"{what}: {reason} (log: {log_path})" if reason else f"{what}; see {log_path}"
