import pytest


@pytest.fixture
def people(operator_user, django_user_model):
    from django.contrib.auth.models import Group

    other = django_user_model.objects.create_user(username="second-operator", password="pw-second")
    other.groups.add(Group.objects.get_or_create(name="operator")[0])
    return operator_user, other
