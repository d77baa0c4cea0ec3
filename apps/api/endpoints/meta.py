"""Who am I, and the API's own description: the OpenAPI schema and its docs page (Swagger UI, served from
our static files)."""

from drf_spectacular.utils import extend_schema
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView
from rest_framework.renderers import TemplateHTMLRenderer
from rest_framework.response import Response

from apps.accounts.models import ApiToken
from apps.accounts.roles import VIEWER, role_of

from .. import serializers as s
from ..base import ApiView


class Me(ApiView):
    roles = {"get": VIEWER}

    @extend_schema(responses=s.MeSerializer, tags=["meta"], summary="Who the request acts as, with which role")
    def get(self, request):
        token = request.auth if isinstance(request.auth, ApiToken) else None
        return Response(
            {
                "username": request.user.get_username(),
                "role": role_of(request.user),
                "authenticated_by": "token" if token else "session",
                "token": {
                    "name": token.name,
                    "prefix": token.prefix,
                    "expires_at": token.expires_at,
                    "created_at": token.created_at,
                }
                if token
                else None,
            }
        )


class Schema(ApiView, SpectacularAPIView):
    """The OpenAPI 3 schema, generated from the code (docs/openapi.yaml is its committed copy)."""

    roles = {"get": VIEWER}

    def _get_version_parameter(self, request):
        # The API is versioned by its path (/api/v1/): ?version= means nothing here. The library would put it in
        # the answer's Content-Disposition filename, where a newline made Django refuse the header (a 500).
        return None


class Docs(ApiView, SpectacularSwaggerSplitView):
    """Swagger UI: its page, and (?script) the script that starts it, a file of its own for our CSP."""

    roles = {"get": VIEWER}
    url_name = "api:schema"
    renderer_classes = [TemplateHTMLRenderer]
