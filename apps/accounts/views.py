from datetime import timedelta

from django.conf import settings
from django.contrib.auth import views as auth_views
from django.db.models import Q
from django.utils import timezone
from django.utils.decorators import method_decorator
from django.views.decorators.debug import sensitive_post_parameters

from apps.audit.services import record

from .models import LoginFailure


@method_decorator(sensitive_post_parameters("password"), name="dispatch")
class ThrottledLoginView(auth_views.LoginView):
    """Django's login, refusing further attempts for a user name or a source address after
    LOGIN_MAX_FAILURES failures within LOGIN_FAILURE_WINDOW_S. Every failure and refusal is audited."""

    template_name = "accounts/login.html"

    def post(self, request, *args, **kwargs):
        username = (request.POST.get("username") or "")[:150]
        address = request.META.get("REMOTE_ADDR")
        since = timezone.now() - timedelta(seconds=settings.LOGIN_FAILURE_WINDOW_S)
        failures = LoginFailure.objects.filter(Q(username=username) | Q(source_address=address), at__gte=since).count()
        if failures >= settings.LOGIN_MAX_FAILURES:
            record("login refused", request=request, outcome="refused",
                   details={"username": username, "recent_failures": failures})
            form = self.get_form()
            form.errors.clear()
            form.add_error(None, "Too many failed attempts. Wait a few minutes before trying again.")
            return self.render_to_response(self.get_context_data(form=form), status=429)
        return super().post(request, *args, **kwargs)

    def form_invalid(self, form):
        username = (self.request.POST.get("username") or "")[:150]
        LoginFailure.objects.create(username=username, source_address=self.request.META.get("REMOTE_ADDR"))
        record("login failed", request=self.request, outcome="refused", details={"username": username})
        return super().form_invalid(form)

    def form_valid(self, form):
        response = super().form_valid(form)
        LoginFailure.objects.filter(username=form.get_user().get_username()).delete()
        record("login", request=self.request)
        return response
