"""The usage events of an answer's SSE stream: how the replica prices the final usage and the
router relays it, read and rewritten in one place so that both agree on the wire's shape."""

from __future__ import annotations

import json
from typing import Any, Callable

_DATA = "data: "


def final_usage(event: dict[str, Any]) -> dict[str, Any] | None:
    """The usage of a stream's closing usage event (usage and no choices); None for any other
    event, including chunks that carry running usage (vLLM's continuous usage stats)."""
    usage = event.get("usage")
    return usage if usage and not event.get("choices") else None


# What a `change` of map_events returns for an event to pass on exactly as it came.
KEEP_EVENT = object()


def map_events(
    packet: str, change: Callable[[dict[str, Any]], dict[str, Any] | object | None], *,
    usage_only: bool = True,
) -> str:
    """Applies `change` to the JSON events of an SSE packet (one or several `data: ` events): an
    event it maps to None is dropped, one it maps to KEEP_EVENT passes on unchanged (no second
    serialization). With `usage_only`, packets without a usage event pass untouched."""
    if usage_only and '"usage"' not in packet:  # the common case
        return packet
    events = []
    for event in packet.split("\n\n"):
        if event.startswith(_DATA + "{"):
            changed = change(json.loads(event[len(_DATA):]))
            if changed is None:
                continue
            if changed is not KEEP_EVENT:
                event = _DATA + json.dumps(changed, separators=(",", ":"))
        events.append(event)
    return "\n\n".join(events)
