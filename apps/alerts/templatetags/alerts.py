from django import template

from apps.alerts.catalogue import BY_KEY
from apps.alerts.selectors import firing_summary as summary

register = template.Library()


@register.filter
def rule_title(key):
    spec = BY_KEY.get(key)
    return spec.title if spec else key


@register.filter
def get_item(mapping, key):
    return (mapping or {}).get(key)


@register.filter
def split_commas(value):
    return value.split(",")


@register.simple_tag
def firing_summary():
    """The header's alert count on every page: firing alerts by severity (one small query)."""
    return summary()
