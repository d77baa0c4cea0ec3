from datetime import timedelta

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth import views as auth_views
from django.contrib.auth.forms import UsernameField
from django.shortcuts import get_object_or_404, redirect
from django.template.response import TemplateResponse
from django.utils import timezone
from django.utils.crypto import salted_hmac
from django.utils.decorators import method_decorator
from django.views.decorators.debug import sensitive_post_parameters
from django.views.decorators.http import require_POST
from django.utils.http import url_has_allowed_host_and_scheme

from apps.audit.actor import Actor
from apps.audit.models import AuditEvent, Outcome
from apps.audit.services import record
from controlplane.client_address import client_address

from . import tokens
from .forms import TokenForm
from .models import ApiToken, LoginFailure
from .roles import VIEWER, require_role


def throttle_name(raw):  # -> (name, whether a user has it)
    """The user name failures are counted under: the one Django authenticates. The login form strips
    spaces and NFKC-normalises (UsernameField), and the user is then looked up in the database, whose
    collation may match other spellings (MariaDB's ignores case): so " alice", "alice\t" and, on
    MariaDB, "ALICE" all count against alice, as they would all log in as alice."""
    name = UsernameField().to_python(raw or "")
    if len(name) > 150:  # no user has such a name: count it as typed (cut to the column)
        return name[:150], False
    users = get_user_model()._default_manager
    try:
        return users.get_by_natural_key(name).get_username(), True
    except get_user_model().DoesNotExist:
        return name, False


def audited_name(name, known):
    """A user name as the audit log (which viewers read) keeps it: a user's name, or for a name no user has (often
    a mistyped password) a keyed fingerprint that tells repeated guesses apart without showing them."""
    return name if known else f"(no such user, fingerprint {salted_hmac('accounts.login.name', name).hexdigest()[:12]})"


def claim_attempt(request, username, known=True):
    """Counts a login attempt before its password is checked: its row first, then every recent row for the
    user name and the client address together, its own included (as django-axes locks: an address guessing
    many names, or a reverse proxy's one address, locks no one else out). Of attempts arriving together, each
    sees at least those that came before it, so no more than LOGIN_MAX_FAILURES get past, whatever the timing.
    Returns the attempt's row (it stays as a failure unless the login succeeds), or None when refused (with the
    refusal audited; a refused attempt does not count)."""
    address = client_address(request)
    attempt = LoginFailure.objects.create(username=username, source_address=address)
    since = timezone.now() - timedelta(seconds=settings.LOGIN_FAILURE_WINDOW_S)
    recent = LoginFailure.objects.filter(username=username, source_address=address, at__gte=since).count()
    refused = None
    if recent > settings.LOGIN_MAX_FAILURES:
        refused = {"recent_failures": recent - 1}
    elif known:
        # Guesses spread over many addresses: over the user-wide limit, only an address this user logged in from
        # lately is let through, so a botnet guessing one name neither keeps guessing nor locks its owner out.
        everywhere = LoginFailure.objects.filter(username=username, at__gte=since).count()
        if everywhere > settings.LOGIN_MAX_FAILURES_PER_USER and not logged_in_from(username, address):
            refused = {
                "recent_failures_every_address": everywhere - 1,
                "why": "too many failures for this user name from every address; this address has not "
                "logged in as this user lately",
            }
    if refused is None:
        return attempt
    attempt.delete()
    record(
        "login refused",
        request=request,
        outcome="refused",
        details={"username": audited_name(username, known), **refused},
    )
    return None


def logged_in_from(username, address):
    """Whether the audit log has a login of this user from this address within LOGIN_KNOWN_ADDRESS_DAYS."""
    since = timezone.now() - timedelta(days=settings.LOGIN_KNOWN_ADDRESS_DAYS)
    users = get_user_model()._default_manager  # a user removed since the name was looked up has no known address
    pks = users.filter(**{get_user_model().USERNAME_FIELD: username}).values("pk")
    return AuditEvent.objects.filter(
        action="login", outcome=Outcome.SUCCESS, actor_user_id__in=pks, source_address=address, created_at__gte=since
    ).exists()


@method_decorator(sensitive_post_parameters("password"), name="dispatch")
class ThrottledLoginView(auth_views.LoginView):
    """Django's login, refusing further attempts for a user name or a source address after
    LOGIN_MAX_FAILURES failures within LOGIN_FAILURE_WINDOW_S. Every failure and refusal is audited.
    The admin site's login is this view too (adminsite.py): one lock and one audit for both doors."""

    template_name = "accounts/login.html"

    def post(self, request, *args, **kwargs):
        self.throttled_as, self.known_name = throttle_name(request.POST.get("username"))
        if claim_attempt(request, self.throttled_as, self.known_name) is None:
            # The form without the password: a refused attempt's password is not even checked.
            form = self.get_form_class()(request, data={"username": request.POST.get("username", "")})
            form.errors.clear()
            form.add_error(None, "Too many failed attempts. Wait a few minutes before trying again.")
            return self.render_to_response(self.get_context_data(form=form), status=429)
        return super().post(request, *args, **kwargs)

    def form_invalid(self, form):  # the attempt's row stays: one more failure
        record(
            "login failed",
            request=self.request,
            outcome="refused",
            details={"username": audited_name(self.throttled_as, self.known_name)},
        )
        return super().form_invalid(form)

    def form_valid(self, form):
        response = super().form_valid(form)
        LoginFailure.objects.filter(username=form.get_user().get_username()).delete()  # the attempt's row too
        record("login", request=self.request)
        return response


# -- API tokens ------------------------------------------------------------------------------------------
JUST_MADE = "api_token_just_made"


@require_role(VIEWER)
def token_list(request):
    """The logged-in user's API tokens. POST makes one; the page it redirects to shows its secret once (kept in
    the session only until then, so a reload neither shows it again nor makes a second token)."""
    form = TokenForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        days = form.cleaned_data["expires_in_days"]
        try:
            token, secret = tokens.create(
                request.user,
                form.cleaned_data["name"],
                actor=Actor.of_request(request),
                expires_at=timezone.now() + timedelta(days=days) if days else None,
            )
        except tokens.Refused as exc:
            form.add_error("name", str(exc))
        else:
            request.session[JUST_MADE] = {"token": token.pk, "secret": secret}
            return redirect("accounts:tokens")
    created = request.session.pop(JUST_MADE, None) if request.method == "GET" else None
    if created:
        created["token"] = ApiToken.objects.filter(pk=created["token"], user=request.user).first()
    status = 400 if form.errors else 200
    now = timezone.now()
    mine = list(ApiToken.objects.filter(user=request.user).order_by("-created_at", "-pk"))
    for token in mine:
        token.current_state = token.state(now)
    return TemplateResponse(
        request, "accounts/tokens.html", {"form": form, "created": created, "tokens": mine}, status=status
    )


@require_role(VIEWER)
@require_POST
def token_revoke(request, pk):
    token = get_object_or_404(ApiToken.objects.select_related("user"), pk=pk, user=request.user)  # only one's own
    try:
        tokens.revoke(token, actor=Actor.of_request(request))
        messages.success(request, f"Revoked {token}: requests with it are refused from now on.")
    except tokens.Refused as exc:
        messages.info(request, str(exc))
    return redirect("accounts:tokens")


def permission_denied(request, exception):
    """The 403 page (handler403): the refusal, and a way back: the page the user came from when it is one of the
    console's own (the Referer, checked against this host), else the fleet overview."""
    referer = request.META.get("HTTP_REFERER", "")
    came_from = (
        referer
        if referer
        and url_has_allowed_host_and_scheme(
            referer, allowed_hosts={request.get_host()}, require_https=request.is_secure()
        )
        else ""
    )
    response = TemplateResponse(
        request, "403.html", {"exception": str(exception) or "", "came_from": came_from}, status=403
    )
    return response.render()
