"""drf-spectacular extensions: how the schema describes our authentication."""

from drf_spectacular.extensions import OpenApiAuthenticationExtension


class BearerTokenScheme(OpenApiAuthenticationExtension):
    target_class = "apps.api.auth.BearerTokenAuthentication"
    name = "token"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "An API token made on the console's API tokens page (pfc_...).",
        }


class SessionScheme(OpenApiAuthenticationExtension):
    target_class = "apps.api.auth.SessionAuthentication"
    name = "session"

    def get_security_definition(self, auto_schema):
        return {
            "type": "apiKey",
            "in": "cookie",
            "name": "sessionid",
            "description": "The browser's login; writes also need the X-CSRFToken header.",
        }
