from django import forms

from .models import REPLICA, SOURCE


class MoveForm(forms.Form):
    """A planned move of either end (or both) of a channel to one of its candidates."""

    new_source = forms.TypedChoiceField(label="Source", coerce=int, required=False, empty_value=None)
    new_replica = forms.TypedChoiceField(label="Replica", coerce=int, required=False, empty_value=None)

    def __init__(self, *args, channel, **kwargs):
        super().__init__(*args, **kwargs)
        self.channel = channel
        for name, side, current in (
            ("new_source", SOURCE, channel.source_server),
            ("new_replica", REPLICA, channel.replica_server),
        ):
            choices = [("", f"(stays on {current})")]
            choices += [(s.pk, f"{s} (weight {w})") for s, w in channel.candidates_for(side) if s.pk != current.pk]
            self.fields[name].choices = choices

    def clean(self):
        data = super().clean()
        if not data.get("new_source") and not data.get("new_replica"):
            raise forms.ValidationError("Choose a new source, a new replica, or both.")
        servers = {s.pk: s for side in (SOURCE, REPLICA) for s, _ in self.channel.candidates_for(side)}
        data["source_server"] = servers.get(data.get("new_source"))
        data["replica_server"] = servers.get(data.get("new_replica"))
        return data
