"""The API's request size limit, checked on Content-Length before anything reads the body (DRF's parsers
read the stream themselves, past Django's DATA_UPLOAD_MAX_MEMORY_SIZE). A body without Content-Length
reaches the views empty (Django reads no more than it announces)."""

from django.conf import settings

from .errors import error_response

PREFIX = "/api/"


class RequestSizeLimitMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if request.path.startswith(PREFIX):
            raw = request.META.get("CONTENT_LENGTH") or "0"
            limit = settings.API_MAX_REQUEST_BYTES
            if not (raw.isascii() and raw.isdigit()):
                return error_response(400, "Content-Length is not a number of bytes.", code="invalid")
            if len(raw) > 18 or int(raw) > limit:
                return error_response(413, f"The request body is {raw[:30]} bytes; the API takes at most {limit:,}.")
        return self.get_response(request)
