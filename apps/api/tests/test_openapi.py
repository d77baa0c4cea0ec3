"""The OpenAPI schema is generated from the code, valid, and committed as docs/openapi.yaml: a change to the
API shows as a change to that file, made on purpose."""

import difflib

from django.conf import settings
from drf_spectacular.drainage import GENERATOR_STATS
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.renderers import OpenApiYamlRenderer
from drf_spectacular.validation import validate_schema

COMMITTED = settings.BASE_DIR / "docs" / "openapi.yaml"
REGENERATE = "DJANGO_DEBUG=1 .venv/bin/python manage.py spectacular --file docs/openapi.yaml --validate"


def generated():
    GENERATOR_STATS.reset()
    schema = SchemaGenerator().get_schema(request=None, public=True)
    return schema, OpenApiYamlRenderer().render(schema, renderer_context={}).decode()


def test_the_schema_is_valid_openapi_3_and_generates_without_warnings():
    schema, _ = generated()
    assert not GENERATOR_STATS, (
        f"drf-spectacular warned: {dict(GENERATOR_STATS._warn_cache)} {dict(GENERATOR_STATS._error_cache)}"
    )
    validate_schema(schema)  # drf-spectacular's own check against the OpenAPI 3.0 JSON schema
    assert schema["openapi"].startswith("3.") and len(schema["paths"]) >= 40
    assert set(schema["components"]["securitySchemes"]) == {"token", "session"}


def test_the_committed_schema_is_the_generated_one():
    _, text = generated()
    committed = COMMITTED.read_text() if COMMITTED.exists() else ""
    if text != committed:
        diff = "".join(
            difflib.unified_diff(
                committed.splitlines(True),
                text.splitlines(True),
                "docs/openapi.yaml (committed)",
                "generated from the code",
                n=2,
            )
        )
        raise AssertionError(
            f"The API's schema changed. If that is meant, regenerate the committed copy:\n    {REGENERATE}\n"
            f"and commit it with the change. The difference:\n{diff[:6000]}"
        )
