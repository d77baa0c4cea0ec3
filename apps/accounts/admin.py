"""Users in Django's admin, audited (apps/accounts/services.py): adding a user, changing it (roles as
groups, superuser, staff, active, permissions...), resetting its password and deleting it."""

from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import UserAdmin
from django.db import transaction

from . import services
from apps.audit.actor import Actor

User = get_user_model()


class AuditedUserAdmin(UserAdmin):
    def save_model(self, request, obj, form, change):
        # The form has set the new values on obj already: the state before comes from the database.
        obj._audit_before = services.user_state(User.objects.get(pk=obj.pk)) if change else None
        super().save_model(request, obj, form, change)

    def save_related(self, request, form, formsets, change):
        super().save_related(request, form, formsets, change)  # groups and permissions are saved here
        services.record_user_saved(
            form.instance, getattr(form.instance, "_audit_before", None), actor=Actor.of_request(request)
        )

    def user_change_password(self, request, id, form_url=""):
        with transaction.atomic():  # the new password and its audit event together
            before = User.objects.filter(pk=id).values_list("password", flat=True).first()
            response = super().user_change_password(request, id, form_url)
            user = User.objects.filter(pk=id).first()
            if user is not None and user.password != before:
                services.record_credentials_reset(user, actor=Actor.of_request(request))
        return response

    def delete_model(self, request, obj):
        user_id, state = obj.pk, services.user_state(obj)
        super().delete_model(request, obj)
        services.record_user_deleted(user_id, state, actor=Actor.of_request(request))

    def delete_queryset(self, request, queryset):
        for user in queryset:
            self.delete_model(request, user)


admin.site.unregister(User)
admin.site.register(User, AuditedUserAdmin)
