"""OpenAI-style error responses: one exception type, one JSON shape, the right status."""

from __future__ import annotations

import json
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException  # FastAPI's subclasses it; unknown paths raise this one
from starlette.responses import JSONResponse

# An error's `type` as plain vLLM writes it (the class names of OpenAI's client, which vLLM
# uses), so that clients moved from `vllm serve` tell errors apart as before; statuses vLLM
# never answers get names in the same style. `code` keeps the app's own name of the condition
# (docs/api.md, "Errors").
_TYPE_BY_STATUS = {
    400: "BadRequestError",
    401: "AuthenticationError",
    403: "PermissionDeniedError",
    404: "NotFoundError",
    408: "RequestTimeoutError",
    413: "RequestTooLargeError",
    422: "UnprocessableEntityError",
    429: "RateLimitError",
    500: "InternalServerError",
    501: "NotImplementedError",
    502: "BadGatewayError",
    503: "ServiceUnavailableError",
    504: "GatewayTimeoutError",
}


class ApiError(Exception):
    """An error the client should see as is: status, a message that names the limit, a code."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        code: str | int | None = None,
        param: str | None = None,
        headers: dict[str, str] | None = None,
        error_type: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.param = param
        self.headers = headers or {}
        self.error_type = error_type

    def to_response(self) -> JSONResponse:
        return JSONResponse(
            status_code=self.status,
            content=error_body(self.status, self.message, code=self.code, param=self.param,
                               error_type=self.error_type),
            headers=self.headers,
        )


def error_body(
    status: int, message: str, *, code: str | int | None = None, param: str | None = None, error_type: str | None = None,
) -> dict[str, Any]:
    """`error_type`, where given, in place of the status's type (see _TYPE_BY_STATUS)."""
    return {
        "error": {
            "message": message,
            "type": error_type or _TYPE_BY_STATUS.get(status, "InternalServerError" if status >= 500 else "BadRequestError"),
            "param": param,
            "code": code,
        }
    }


# vLLM's `type` for a body it could not parse or that fails its schema: the status's phrase,
# where its own checks of a parsed request say BadRequestError.
BODY_ERROR_TYPE = "Bad Request"


def validation_error(error: RequestValidationError | Exception) -> ApiError:
    """A 400 that says what is wrong with the body: bad JSON, or which field fails and why."""
    issues = error.errors() if hasattr(error, "errors") else []
    raw_body = getattr(error, "body", None)
    if isinstance(raw_body, (bytes, str)):
        # FastAPI hands on a body it could not decode as is; say so rather than "not an object".
        try:
            json.loads(raw_body)
        except ValueError as decode_error:
            return ApiError(400, f"malformed JSON body: {decode_error}", code="invalid_json",
                            error_type=BODY_ERROR_TYPE)
    if any(issue.get("type") == "json_invalid" for issue in issues):
        detail = next(issue for issue in issues if issue.get("type") == "json_invalid")
        reason = (detail.get("ctx") or {}).get("error", "invalid JSON")
        return ApiError(400, f"malformed JSON body: {reason}", code="invalid_json", error_type=BODY_ERROR_TYPE)
    parts = []
    for issue in issues[:5]:
        location = ".".join(str(p) for p in issue.get("loc", ()) if p != "body") or "body"
        parts.append(f"{location}: {issue.get('msg', 'invalid')}")
    first_param = ".".join(str(p) for p in issues[0].get("loc", ()) if p != "body") if issues else None
    return ApiError(
        400,
        "invalid request: " + ("; ".join(parts) or str(error)),
        code="invalid_request",
        param=first_param or None,
        error_type=BODY_ERROR_TYPE,
    )


def install_error_handlers(app: FastAPI) -> None:
    """Every error leaves the router in one OpenAI shape, whichever layer raised it."""

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, error: ApiError) -> JSONResponse:
        return error.to_response()

    @app.exception_handler(RequestValidationError)
    async def _invalid_body(_: Request, error: RequestValidationError) -> JSONResponse:
        return validation_error(error).to_response()

    @app.exception_handler(HTTPException)
    async def _http_error(_: Request, error: HTTPException) -> JSONResponse:
        code = "model_not_found" if error.status_code == 404 else None
        return ApiError(error.status_code, str(error.detail), code=code).to_response()
