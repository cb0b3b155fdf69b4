from django import forms

from core.errors import ServiceError
from datasets.models import Dataset, Task
from datasets.services.datasets import DEPTH_SCALE_DEFAULT, depth_scale_parse

DEPTH_SCALE_HELP = (
    "Depth datasets: the PNG value of one metre (1000 when maps are in millimetres, 1 when in "
    "metres)."
)


def _depth_scale_field(initial: float | None = DEPTH_SCALE_DEFAULT) -> forms.Field:
    # A text box, not FloatField: the service's parser gives the one reason for every bad value.
    return forms.CharField(
        required=False,
        initial=initial,
        label="Depth scale",
        help_text=DEPTH_SCALE_HELP,
        widget=forms.TextInput(attrs={"inputmode": "decimal"}),
    )


def _clean_depth_scale(form: forms.Form) -> float | None:
    value = form.cleaned_data.get("depth_scale")
    try:
        return depth_scale_parse(value)
    except ServiceError as e:
        raise forms.ValidationError(str(e)) from None


class DatasetCreateForm(forms.Form):
    name = forms.CharField(max_length=100)
    task = forms.ChoiceField(choices=Task.choices, initial=Task.DETECT)
    depth_scale = _depth_scale_field()
    classes = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 4, "placeholder": "person\ncar\nbicycle"}),
        help_text="One per line, in class-id order. Leave empty to take them from the import.",
    )
    description = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}))

    def clean_depth_scale(self) -> float | None:
        if self.data.get("task") != Task.DEPTH:
            return None  # only depth maps have a scale
        return _clean_depth_scale(self)


class DatasetEditForm(forms.ModelForm):
    class Meta:
        model = Dataset
        fields = ["name", "description", "is_public", "depth_scale"]
        labels = {"is_public": "Public: list it in Explore, where anyone can view and clone it"}
        widgets = {"description": forms.Textarea(attrs={"rows": 3})}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.instance.task == Task.DEPTH:
            self.fields["depth_scale"] = _depth_scale_field(
                self.instance.depth_scale or DEPTH_SCALE_DEFAULT
            )
        else:
            del self.fields["depth_scale"]

    def clean_depth_scale(self) -> float | None:
        return _clean_depth_scale(self)
