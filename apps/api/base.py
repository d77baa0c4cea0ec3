"""What every endpoint shares: the role table, JSON only, no caching, validated query strings and bodies,
page-number pages with a bounded size."""

from django.conf import settings
from django.core.paginator import InvalidPage
from django.forms.models import model_to_dict
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_field, inline_serializer
from rest_framework import exceptions, serializers
from rest_framework.pagination import PageNumberPagination
from rest_framework.views import APIView

from apps.audit.services import record
from apps.fleet.validators import parse_endpoint


# A thin endpoint: it validates input, calls one selector or service, and serializes the answer. `roles` maps
# each method it handles to the role it needs (apps/api/permissions.py). (No docstring: the schema would
# give it to every endpoint as its description.)
class ApiView(APIView):
    roles = {}
    # Spelled out: a view that also inherits a library's view (the schema, the docs) keeps ours.
    authentication_classes = APIView.authentication_classes
    permission_classes = APIView.permission_classes
    throttle_classes = APIView.throttle_classes

    @classmethod
    def as_view(cls, **initkwargs):
        view = super().as_view(**initkwargs)
        # The login middleware would redirect a token request to the login page: DRF authenticates here.
        view.login_required = False
        return view

    @property
    def allowed_methods(self):
        return [m for m in super().allowed_methods if m != "OPTIONS"]  # no metadata: OPTIONS answers 405

    def finalize_response(self, request, response, *args, **kwargs):
        response = super().finalize_response(request, response, *args, **kwargs)
        response.headers.setdefault("Cache-Control", "private, no-store")  # fleet data stays out of caches
        return response


def query(serializer_class, request):
    """The query string, validated: a 400 naming the parameter and the reason, or the values."""
    serializer = serializer_class(data=request.query_params)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


def body(serializer_class, request, **context):
    if not isinstance(request.data, dict):
        raise exceptions.ValidationError({"non_field_errors": ["The body must be a JSON object."]})
    serializer = serializer_class(data=request.data, context={"request": request, **context})
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


def form_errors(form):
    """A Django form's errors as the API's 400 (its messages, by field)."""
    return exceptions.ValidationError(
        {name if name != "__all__" else "non_field_errors": errors for name, errors in form.errors.items()}
    )


def page_form(form_class, data, *, request, action, instance=None, cluster=None, **form_kwargs):
    """A body (its types checked) run through the page's form: the same rules and messages. A body names only the
    fields it sets. An invalid one is audited as the page audits it, and answers 400."""
    # What the body leaves out keeps its value, or the model's default for a new one (not a checkbox's "off").
    current = model_to_dict(instance or form_class._meta.model(), fields=form_class._meta.fields)
    data = {
        **{
            k: [getattr(v, "pk", v) for v in value] if isinstance(value, list) else value
            for k, value in current.items()
        },
        **data,
    }
    form = form_class({k: v for k, v in data.items() if v is not None}, instance=instance, **form_kwargs)
    if not form.is_valid():
        record(
            action,
            request=request,
            outcome="invalid",
            cluster=cluster,
            target=str(instance or ""),
            details={"errors": form.errors.get_json_data()},
        )
        raise form_errors(form)
    return form


class Pagination(PageNumberPagination):
    """?page=N&page_size=M (at most API_MAX_PAGE_SIZE); a page that does not exist is a 400, not a 404."""

    page_size_query_param = "page_size"

    def get_page_size(self, request):
        raw = request.query_params.get(self.page_size_query_param)
        if raw in (None, ""):
            return settings.API_PAGE_SIZE
        limit = settings.API_MAX_PAGE_SIZE
        if not (raw.isascii() and raw.isdigit()) or len(raw) > 6 or not 1 <= int(raw) <= limit:
            raise exceptions.ValidationError({"page_size": [f"A whole number from 1 to {limit}."]})
        return int(raw)

    def paginate_queryset(self, queryset, request, view=None):
        self.request = request
        page_size = self.get_page_size(request)
        paginator = self.django_paginator_class(queryset, page_size)
        number = request.query_params.get(self.page_query_param) or 1
        try:
            self.page = paginator.page(number)
        except InvalidPage as exc:
            raise exceptions.ValidationError({"page": [f"{str(number)[:40]!r}: {exc}"]}) from None
        return list(self.page)


def paged(view, request, queryset, serializer_class=None, *, rows=None):
    """One page of `queryset` as {"count", "next", "previous", "results"}: each row by the serializer, or by
    rows(page) (the long lists: plain values, the serializer's shape, without its per-field cost at 500 rows)."""
    pagination = Pagination()
    page = pagination.paginate_queryset(queryset, request, view)
    data = rows(page) if rows else serializer_class(page, many=True, context={"request": request}).data
    return pagination.get_paginated_response(data)


def list_schema(serializer_class, filters=None, **kwargs):
    """The schema of a paged list: its filters, page and page_size, and the envelope around the rows."""
    name = serializer_class.__name__.removesuffix("Serializer") + "Page"
    envelope = inline_serializer(
        name,
        {
            "count": serializers.IntegerField(),
            "next": serializers.URLField(allow_null=True),
            "previous": serializers.URLField(allow_null=True),
            "results": serializer_class(many=True),
        },
    )
    paging = [
        OpenApiParameter("page", int, description="1, 2, ..."),
        OpenApiParameter("page_size", int, description="rows per page (default 50, at most 500)"),
    ]
    return extend_schema(parameters=([filters] if filters else []) + paging, responses=envelope, **kwargs)


class IdField(serializers.IntegerField):
    """An object id in a query string or body: a positive 64-bit integer."""

    def __init__(self, **kwargs):
        super().__init__(min_value=1, max_value=2**63 - 1, **kwargs)


@extend_schema_field({"oneOf": [{"type": "integer", "minimum": 1}, {"type": "string", "example": "127.0.0.1:3312"}]})
class ServerRefField(serializers.Field):
    """A backend named by its id or, as the commands take it, by 'host:port' ('[v6]:port'): the id as an int, or
    the (host, port) pair; which server it is depends on the cluster, so the endpoint looks it up."""

    default_error_messages = {"invalid": "Give a backend id or HOST:PORT: {reason}."}

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, (int, str)):
            self.fail("invalid", reason=f"{type(data).__name__} is neither a number nor a string")
        if isinstance(data, int) or (isinstance(data, str) and data.strip().isascii() and data.strip().isdecimal()):
            return IdField().run_validation(data)
        try:
            return parse_endpoint(data)
        except ValueError as e:
            self.fail("invalid", reason=str(e))

    def to_representation(self, value):
        return value if isinstance(value, int) else "%s:%d" % value
