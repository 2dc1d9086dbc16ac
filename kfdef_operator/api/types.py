"""Types shared by every layer."""

from __future__ import annotations

from typing import Any

#: A Kubernetes object or any JSON document, as decoded from the wire.
JSON = dict[str, Any]
