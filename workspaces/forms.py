from django import forms

from workspaces.models import ApiKeyScope, Project, Role


class WorkspaceForm(forms.Form):
    name = forms.CharField(max_length=100)


class ProjectForm(forms.ModelForm):
    class Meta:
        model = Project
        fields = ["name", "description"]
        widgets = {"description": forms.Textarea(attrs={"rows": 3})}


class ConfirmForm(forms.Form):
    confirm = forms.CharField(max_length=100)


class InvitationForm(forms.Form):
    email = forms.EmailField()
    role = forms.ChoiceField(choices=Role.choices, initial=Role.EDITOR)

    def __init__(self, *args, assignable: list[str], **kwargs):
        super().__init__(*args, **kwargs)
        # A forged role outside this list fails validation with a clear message.
        self.fields["role"].choices = [c for c in Role.choices if c[0] in assignable]


class RoleForm(forms.Form):
    role = forms.ChoiceField(choices=Role.choices)

    def __init__(self, *args, assignable: list[str], **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["role"].choices = [c for c in Role.choices if c[0] in assignable]


class TransferForm(forms.Form):
    membership = forms.IntegerField()


class ApiKeyForm(forms.Form):
    name = forms.CharField(max_length=100)
    scopes = forms.MultipleChoiceField(
        choices=ApiKeyScope.choices,
        widget=forms.CheckboxSelectMultiple,
        initial=[ApiKeyScope.READ],
    )
    expires_at = forms.DateField(
        required=False,
        widget=forms.DateInput(attrs={"type": "date"}),
        help_text="Optional. The key stops working at the start of this day (UTC).",
    )
