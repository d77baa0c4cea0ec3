"""Forms of the change set editor, built from the table specs (tables.py): one field per column, with the
CHECK constraints of ProxySQL's own table as validation, so a bad value is refused here, never at a node."""

from django import forms

from apps.fleet.validators import validate_no_nul

from . import content as C
from . import files
from . import variables as V
from .findings import regex_error
from .tables import INT, MYSQL_QUERY_RULES, MYSQL_SERVERS, MYSQL_USERS, SCHEDULER, RowError, check_row

# Shown first in the editor: the columns operators change daily; the rest sit under "more columns".
MAIN_COLUMNS = {
    "mysql_servers": (
        "hostgroup_id",
        "hostname",
        "port",
        "status",
        "weight",
        "max_connections",
        "max_replication_lag",
        "max_latency_ms",
        "use_ssl",
        "compression",
        "comment",
    ),
    "mysql_query_rules": (
        "rule_id",
        "active",
        "flagIN",
        "username",
        "schemaname",
        "match_digest",
        "match_pattern",
        "re_modifiers",
        "destination_hostgroup",
        "mirror_hostgroup",
        "mirror_flagOUT",
        "flagOUT",
        "cache_ttl",
        "multiplex",
        "apply",
        "comment",
    ),
    "mysql_users": (
        "username",
        "password",
        "default_hostgroup",
        "active",
        "transaction_persistent",
        "max_connections",
        "fast_forward",
        "default_schema",
        "comment",
    ),
}


def _field(col):
    label = col.label or col.name
    required = not col.null and col.type == INT and col.default is None
    if col.choices:
        choices = ([("", "NULL (not set)")] if col.null else []) + [(str(c), str(c)) for c in col.choices]
        coerce = int if col.type == INT else str
        return forms.TypedChoiceField(
            label=label,
            choices=choices,
            coerce=coerce,
            required=False,
            empty_value=None if col.null else col.default,
            initial=None if col.default is None else str(col.default),
        )
    if col.type == INT:
        return forms.IntegerField(
            label=label, required=required, min_value=col.min, max_value=col.max or 2_147_483_647, initial=col.default
        )
    return forms.CharField(
        label=label,
        required=not col.null and col.default is None and col.name != "comment",
        initial=col.default,
        strip=False,
        validators=[validate_no_nul],
        empty_value=None if col.null else "",
        max_length=10_000,
    )


class RowForm(forms.Form):
    """One row of one table. `initial` may be a content row; password fields are never rendered back.
    `regex_engine`: ProxySQL's (1 PCRE, 2 RE2), which a query rule's patterns must compile in."""

    def __init__(self, *args, table, regex_engine=1, **kwargs):
        super().__init__(*args, **kwargs)
        self.table = table
        self.regex_engine = regex_engine
        for col in table.columns:
            if table is MYSQL_USERS and col.name == "password":
                self.fields["password"] = forms.CharField(
                    label="password",
                    required=False,
                    strip=False,
                    widget=forms.PasswordInput(render_value=False),
                    help_text="stored encrypted and sent to ProxySQL as the mysql_native_password hash; "
                    "leave empty to keep the current one",
                )
                continue
            self.fields[col.name] = _field(col)
        if table is MYSQL_SERVERS:
            self.fields["status"].help_text = "SHUNNED is ProxySQL's own verdict, never written"
        if table is SCHEDULER:
            only_admins = "ProxySQL runs this executable on its host: only an admin may add or change scheduler rows"
            self.fields["filename"].help_text = only_admins
        # A copy: `initial` is the caller's row (popping from it while reading it was a 500 on editing a user).
        self.initial = {
            name: value for name, value in self.initial.items() if not (C.is_secret(value) or name == "password")
        }

    def main_fields(self):
        names = MAIN_COLUMNS.get(self.table.name, self.table.column_names)
        return [self[n] for n in names if n in self.fields]

    def more_fields(self):
        names = MAIN_COLUMNS.get(self.table.name, self.table.column_names)
        return [self[n] for n in self.fields if n not in names]

    def clean(self):
        data = super().clean()
        if self.errors:
            return data
        row = {c.name: data.get(c.name) for c in self.table.columns if c.name != "password"}
        if self.table is MYSQL_USERS:
            row["password"] = None
        for col in self.table.columns:
            if col.type != INT and row.get(col.name) is None and not col.null:
                row[col.name] = col.default if col.default is not None else ""
        # A value ProxySQL holds as the one the row had (NULL and '' where it mixes them, re_modifiers' case) stays as
        # the version wrote it: saving a row as shown changes nothing.
        for name, value in row.items():
            if name in self.initial and self.table.same_value(name, value, self.initial[name]):
                row[name] = self.initial[name]
        try:
            check_row(self.table, row)
        except RowError as exc:
            self.add_error(exc.column if exc.column in self.fields else None, exc.message)
        if self.table is MYSQL_QUERY_RULES:
            for name in ("match_digest", "match_pattern"):
                error = row[name] and regex_error(row[name], row["re_modifiers"], self.regex_engine)
                if error:
                    self.add_error(
                        name,
                        f"does not compile in ProxySQL's {'RE2' if self.regex_engine == 2 else 'PCRE'} "
                        f"engine: {error} (ProxySQL would load it and never match)",
                    )
        if "\x00" in (data.get("password") or ""):
            self.add_error("password", "contains a NUL character")
        data["row"] = row
        return data


class VariableForm(forms.Form):
    name = forms.CharField(
        max_length=200,
        validators=[validate_no_nul],
        help_text="admin-* variables (the admin interface, its REST API and web server) expose "
        "the ProxySQL host: only an admin may change them",
    )
    value = forms.CharField(max_length=10_000, required=False, strip=False, validators=[validate_no_nul])

    def clean(self):
        data = super().clean()
        name = data.get("name")
        if not name:
            return data
        if name in V.SECRETS:
            if not data.get("value"):
                self.add_error("value", "enter the new password")
            return data
        value, error = V.check(name, data.get("value"))
        if error:
            self.add_error("value" if V.managed(name) and V.spec(name) else "name", f"{name} {error}")
        data["value"] = value
        return data


class RolesForm(forms.Form):
    writer = forms.IntegerField(min_value=0, max_value=2_147_483_647)
    reader = forms.IntegerField(min_value=0, max_value=2_147_483_647)
    backup_writer = forms.IntegerField(min_value=0, max_value=2_147_483_647, required=False)
    offline = forms.IntegerField(min_value=0, max_value=2_147_483_647, required=False)
    writer_is_also_reader = forms.TypedChoiceField(choices=[("0", "0"), ("1", "1"), ("2", "2")], coerce=int)

    def clean(self):
        data = super().clean()
        ids = [data.get(k) for k in C.ROLE_KEYS if data.get(k) is not None]
        if len(ids) != len(set(ids)):
            raise forms.ValidationError("Each role needs its own hostgroup.")
        return data


class ReasonForm(forms.Form):
    reason = forms.CharField(
        max_length=2000, required=True, validators=[validate_no_nul], widget=forms.Textarea(attrs={"rows": 2})
    )


class UploadForm(forms.Form):
    file = forms.FileField(
        help_text="a YAML file exported from this cluster's configuration page, edited: the "
        "configuration you want, whatever version it was exported from"
    )
    reason = forms.CharField(max_length=2000, required=False, validators=[validate_no_nul])  # the rule: the service's
    expect_version = forms.IntegerField(
        required=False,
        min_value=1,
        max_value=2_147_483_647,
        label="expect version",
        help_text="optional: refuse unless the cluster is still at this version",
    )

    def clean_file(self):
        f = self.cleaned_data["file"]
        if f.size > files.MAX_FILE_CHARS:  # refused on its size before it is read
            raise forms.ValidationError("The file is larger than 5 MB.")
        try:
            return f.read().decode("utf-8")
        except UnicodeDecodeError:
            raise forms.ValidationError("The file is not UTF-8 text.") from None
