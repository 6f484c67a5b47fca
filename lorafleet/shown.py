"""What text from outside (an engine's message, the Kubernetes API's, a log field, a name) must never show on a
terminal or in a log line: C0 and C1 controls (a terminal's escape sequences) and the bidirectional overrides and
isolates (U+202E shows the rest of the line reversed, or reorders a table's cells after it)."""

from __future__ import annotations

import re

UNSHOWN = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")

__all__ = ["UNSHOWN"]
