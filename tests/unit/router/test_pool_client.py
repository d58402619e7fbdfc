"""The router's pool handles travel as the config's transport says, whatever the process that
built the app had in its environment."""

from __future__ import annotations

import pytest

from router.pool_client import PoolClient
from router.pool_health import PoolHealth


class RecordingHandle:
    def __init__(self) -> None:
        self.options_given: dict = {}

    def options(self, **options) -> "RecordingHandle":
        self.options_given = options
        return self


@pytest.mark.parametrize("by_reference", [False, True])
def test_each_pool_handle_streams_by_the_transport_asked_for(by_reference):
    handles = {"short": RecordingHandle(), "long": RecordingHandle()}
    PoolClient(handles, PoolHealth(handles), request_timeout_s=30, by_reference=by_reference)
    assert all(h.options_given == {"stream": True, "_by_reference": by_reference} for h in handles.values())
