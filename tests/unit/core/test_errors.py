"""Error bodies: OpenAI's shape, and 400 messages that say what is wrong."""

from __future__ import annotations

import json

import pytest
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError

from core.errors import ApiError, error_body, validation_error
from core.upstream import ChatCompletionRequest


def test_error_body_shape():
    assert error_body(503, "no pool", code="no_provider") == {
        "error": {"message": "no pool", "type": "ServiceUnavailableError", "param": None, "code": "no_provider"}
    }


def test_api_error_response_carries_status_and_headers():
    response = ApiError(429, "slow down", headers={"Retry-After": "3"}).to_response()
    assert response.status_code == 429 and response.headers["retry-after"] == "3"
    assert json.loads(response.body)["error"]["type"] == "RateLimitError"


def test_malformed_json_is_named():
    error = RequestValidationError([{"type": "model_attributes_type", "loc": ("body",), "msg": "x"}], body=b"{bad")
    api_error = validation_error(error)
    assert api_error.status == 400 and api_error.message.startswith("malformed JSON body:")
    # What plain vLLM calls a body it cannot parse, where its own checks say BadRequestError.
    assert json.loads(api_error.to_response().body)["error"]["type"] == "Bad Request"


def test_schema_error_names_the_field():
    with pytest.raises(ValidationError) as caught:
        ChatCompletionRequest.model_validate({"model": "m", "messages": "not a list"})
    api_error = validation_error(caught.value)
    assert api_error.status == 400
    assert "messages" in api_error.message and api_error.param == "messages"
