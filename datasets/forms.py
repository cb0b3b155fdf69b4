from django import forms

from datasets.models import Dataset, Task


class DatasetCreateForm(forms.Form):
    name = forms.CharField(max_length=100)
    task = forms.ChoiceField(choices=Task.choices, initial=Task.DETECT)
    classes = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 4, "placeholder": "person\ncar\nbicycle"}),
        help_text="One per line, in class-id order. Leave empty to take them from the import.",
    )
    description = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}))


class DatasetEditForm(forms.ModelForm):
    class Meta:
        model = Dataset
        fields = ["name", "description", "is_public"]
        labels = {"is_public": "Public: list it in Explore, where anyone can view and clone it"}
        widgets = {"description": forms.Textarea(attrs={"rows": 3})}
