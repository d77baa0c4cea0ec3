"""Django's admin site (apps.ConsoleAdminConfig names it: Django's hook for a site class of one's own) with the
console's login: /admin/login/ is a second door to the same accounts, so it goes through the same throttle
and audit (views.ThrottledLoginView); a password changed at /admin/password_change/ is audited."""

from django.contrib import admin
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth import REDIRECT_FIELD_NAME
from django.contrib.auth.decorators import login_not_required
from django.db import transaction
from django.shortcuts import redirect
from django.urls import reverse
from django.utils.decorators import method_decorator
from django.utils.translation import gettext as _
from django.views.decorators.cache import never_cache

from . import services
from .views import ThrottledLoginView
from apps.audit.actor import Actor


class ConsoleAdminSite(admin.AdminSite):
    @method_decorator(never_cache)
    @login_not_required
    def login(self, request, extra_context=None):
        """AdminSite.login (its page, its staff-only form) with the console's login view in place of Django's."""
        if request.method == "GET" and self.has_permission(request):
            return redirect(reverse("admin:index", current_app=self.name))
        context = {
            **self.each_context(request),
            "title": _("Log in"),
            "subtitle": None,
            "app_path": request.get_full_path(),
            "username": request.user.get_username(),
        }
        if REDIRECT_FIELD_NAME not in request.GET and REDIRECT_FIELD_NAME not in request.POST:
            context[REDIRECT_FIELD_NAME] = reverse("admin:index", current_app=self.name)
        request.current_app = self.name
        return ThrottledLoginView.as_view(
            extra_context={**context, **(extra_context or {})},
            authentication_form=self.login_form or AdminAuthenticationForm,
            template_name=self.login_template or "admin/login.html",
        )(request)

    def password_change(self, request, extra_context=None):
        with transaction.atomic():  # the new password and its audit event together
            before = request.user.password
            response = super().password_change(request, extra_context)
            if request.user.password != before:
                services.record_own_password_changed(request.user, actor=Actor.of_request(request))
        return response
