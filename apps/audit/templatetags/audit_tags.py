import json

from django import template
from django.core.serializers.json import DjangoJSONEncoder

register = template.Library()


@register.filter
def compact_json(value):
    """Details as one line of JSON (escaped by the template like any text)."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, cls=DjangoJSONEncoder, separators=(", ", ": "))
