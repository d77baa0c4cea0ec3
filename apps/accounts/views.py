from datetime import timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth import views as auth_views
from django.contrib.auth.forms import UsernameField
from django.db.models import Q
from django.utils import timezone
from django.utils.decorators import method_decorator
from django.views.decorators.debug import sensitive_post_parameters

from apps.audit.services import record

from .models import LoginFailure


def throttle_name(raw):
    """The user name failures are counted under: the one Django authenticates. The login form strips
    spaces and NFKC-normalises (UsernameField), and the user is then looked up in the database, whose
    collation may match other spellings (MariaDB's ignores case): so " alice", "alice\t" and, on
    MariaDB, "ALICE" all count against alice, as they would all log in as alice."""
    name = UsernameField().to_python(raw or "")
    if len(name) > 150:  # no user has such a name: count it as typed (cut to the column)
        return name[:150]
    users = get_user_model()._default_manager
    try:
        return users.get_by_natural_key(name).get_username()
    except get_user_model().DoesNotExist:
        return name


@method_decorator(sensitive_post_parameters("password"), name="dispatch")
class ThrottledLoginView(auth_views.LoginView):
    """Django's login, refusing further attempts for a user name or a source address after
    LOGIN_MAX_FAILURES failures within LOGIN_FAILURE_WINDOW_S. Every failure and refusal is audited."""

    template_name = "accounts/login.html"

    def post(self, request, *args, **kwargs):
        username = throttle_name(request.POST.get("username"))
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
        username = throttle_name(self.request.POST.get("username"))
        LoginFailure.objects.create(username=username, source_address=self.request.META.get("REMOTE_ADDR"))
        record("login failed", request=self.request, outcome="refused", details={"username": username})
        return super().form_invalid(form)

    def form_valid(self, form):
        response = super().form_valid(form)
        LoginFailure.objects.filter(username=form.get_user().get_username()).delete()
        record("login", request=self.request)
        return response
