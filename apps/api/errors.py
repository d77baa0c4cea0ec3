"""Every API error has one shape, whatever raised it:

    {"error": {"code": "invalid", "message": "drain_timeout_ms: Ensure this value is ...",
               "fields": {"drain_timeout_ms": ["Ensure this value is greater than or equal to 50."]}}}

`fields` is there for 400s (dotted paths for nested input: "edits.2.row"). 401, 403, 404, 405, 409 (a
service refused: guards, two-person rule, a lock, a stale change set), 413, 415, 429 (with Retry-After)
and an unexpected exception (500, logged with its traceback, never shown) all answer JSON. (DRF adds the
Allow header to every answer, a 405 included.)
"""

import logging
import math

from django.conf import settings
from django.core.exceptions import PermissionDenied, RequestDataTooBig, SuspiciousOperation
from django.http import Http404, JsonResponse
from rest_framework import exceptions, status
from rest_framework.views import set_rollback

from apps.accounts.tokens import Refused as TokenRefused
from apps.alerts.services import Refused as AlertRefused
from apps.configuration.services import Refused as ConfigRefused
from apps.operations.services import NotAllowed
from apps.rollouts.services import Refused as RolloutRefused

log = logging.getLogger(__name__)

CODES = {
    400: "invalid",
    401: "not_authenticated",
    403: "permission_denied",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    409: "refused",
    413: "request_too_large",
    415: "unsupported_media_type",
    429: "throttled",
    500: "internal_error",
}


class Refused(exceptions.APIException):
    """A service said no (guards failed, the two-person rule, another operation holds the cluster...)."""

    status_code = status.HTTP_409_CONFLICT
    default_code = "refused"


class TooLarge(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_code = "request_too_large"


def service_refusals():
    """The exceptions by which services refuse a request: they answer 409 with the service's message."""
    return NotAllowed, ConfigRefused, TokenRefused, AlertRefused, RolloutRefused


def error_response(status_code, message, *, code=None, fields=None, headers=None):
    body = {"code": code or CODES.get(status_code, "error"), "message": str(message)}
    if fields:
        body["fields"] = fields
    response = JsonResponse({"error": body}, status=status_code, json_dumps_params={"separators": (",", ":")})
    for name, value in (headers or {}).items():
        response[name] = value
    return response


def flatten(detail, path=""):
    """DRF's nested error details as {"a.b.0.c": ["reason", ...]}."""
    if isinstance(detail, dict):
        out = {}
        for key, value in detail.items():
            out.update(flatten(value, f"{path}.{key}" if path else str(key)))
        return out
    if isinstance(detail, list) and any(isinstance(item, (dict, list)) for item in detail):
        out = {}
        for index, value in enumerate(detail):
            if value:  # a list of items: only those with errors
                out.update(flatten(value, f"{path}.{index}" if path else str(index)))
        return out
    items = detail if isinstance(detail, list) else [detail]
    return {path or "non_field_errors": [str(item) for item in items]}


def exception_handler(exc, context):
    """DRF's exception handler: the one shape above for everything, including what nobody expected."""
    if isinstance(exc, Http404):
        exc = exceptions.NotFound(str(exc) or "Not found.")
    elif isinstance(exc, PermissionDenied):
        exc = exceptions.PermissionDenied(str(exc) or None)
    elif isinstance(exc, RequestDataTooBig):  # Django's DATA_UPLOAD_MAX_MEMORY_SIZE, for the fields of a body
        exc = TooLarge(
            f"The body's fields are larger than {settings.DATA_UPLOAD_MAX_MEMORY_SIZE:,} bytes; a large "
            "configuration file goes as a multipart upload (its file field is not counted)."
        )
    elif isinstance(exc, SuspiciousOperation):
        exc = exceptions.ParseError(str(exc))
    elif isinstance(exc, service_refusals()) and getattr(exc, "field", None):  # a field missing (a change set's reason)
        exc = exceptions.ValidationError({exc.field: [str(exc)]})
    elif isinstance(exc, service_refusals()):  # 409, or 403 for what this user may not do (NotPermitted)
        exc = exceptions.PermissionDenied(str(exc)) if getattr(exc, "forbidden", False) else Refused(str(exc))
    if not isinstance(exc, exceptions.APIException):
        request = context.get("request")
        log.exception("API %s %s failed", getattr(request, "method", "?"), getattr(request, "path", "?"), exc_info=exc)
        set_rollback()
        return error_response(
            500,
            "Internal error: the request failed on the server; the error is logged there. "
            "The audit log says what was changed, if anything.",
        )
    headers = {}
    if getattr(exc, "auth_header", None):
        headers["WWW-Authenticate"] = exc.auth_header
    if getattr(exc, "wait", None) is not None:
        headers["Retry-After"] = str(max(1, math.ceil(exc.wait)))
    set_rollback()
    if isinstance(exc, exceptions.ValidationError):
        fields = flatten(exc.detail)
        message = "; ".join(
            f"{name}: {reasons[0]}" if name != "non_field_errors" else reasons[0]
            for name, reasons in list(fields.items())[:5]
        )
        return error_response(400, message or "Invalid input.", fields=fields, headers=headers)
    detail = exc.detail
    message = detail if isinstance(detail, str) else "; ".join(str(v) for v in flatten(detail).values())
    if exc.status_code == 401:
        code = "authentication_failed" if isinstance(exc, exceptions.AuthenticationFailed) else "not_authenticated"
    else:
        code = CODES.get(exc.status_code) or getattr(detail, "code", None)
    return error_response(exc.status_code, message, code=code, headers=headers)


def not_found(request, *args, **kwargs):
    """The API's catch-all: a URL under /api/ that names no endpoint."""
    return error_response(404, f"No API endpoint at {request.path[:200]}. The endpoints are listed at /api/v1/docs/.")
