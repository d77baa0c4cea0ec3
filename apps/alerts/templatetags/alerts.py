from django import template

from apps.alerts.catalogue import BY_KEY

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
