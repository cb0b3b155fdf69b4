"""A sweep's search space: each impossible range or list is refused with its reason; what is
accepted is stored as a trial will use it. No database: the rules are Ultralytics' own."""

import pytest

from core.errors import ServiceError
from sweeps.services.space import (
    costliest_params,
    space_clean,
    space_parse,
    trial_params,
)
from tests.sweeps.conftest import base_params


@pytest.mark.parametrize(
    ("space", "reason"),
    [
        ({"lr0": {"low": 0.1, "high": 0.01}}, "lr0: the range's low (0.1) must be below its high"),
        ({"lr0": {"low": 0.01, "high": 0.01}}, "must be below its high"),
        ({"lr0": {"low": 0.0, "high": 0.1, "log": True}}, "a log range needs a low above 0"),
        ({"imgsz": {"choices": [320, 100]}}, "imgsz: 100 is not a multiple of 32"),
        ({"imgsz": {"choices": [8192]}}, "imgsz: 8192 is outside 32 to 4096"),
        ({"imgsz": {"low": 64, "high": 100}}, "imgsz: 100 is not a multiple of 32"),
        ({"lr": {"low": 0.001, "high": 0.1}}, "Unknown argument 'lr'; did you mean 'lr0' or"),
        ({"optimizer": {"choices": []}}, "optimizer: the list is empty"),
        ({"optimizer": {"low": 1, "high": 2}}, "optimizer is chosen from a list, not a range"),
        ({"optimizer": ["SGD", "Adamish"]}, "Optimizer must be"),
        ({"mosaic": {"low": 0.0, "high": 1.5}}, "mosaic: mosaic must be between 0.0 and 1.0"),
        ({"epochs": {"low": 1.5, "high": 3}}, "epochs: a range of whole numbers"),
        ({"model_size": ["n", "q"]}, "model_size: 'q' is not a size"),
        ({"lr0": {"low": 0.001}}, "a range is {low, high}"),
        ({}, "Search at least one argument"),
    ],
)
def test_an_impossible_space_is_refused_with_its_reason(space, reason):
    with pytest.raises(ServiceError) as refused:
        space_clean(space)
    assert reason in str(refused.value)


def test_a_space_is_stored_as_trials_use_it():
    space = space_clean(
        {
            "lr0": {"low": 1e-4, "high": 1e-1, "log": True},
            "imgsz": [64, 128, 64],
            "optimizer": ["sgd", "AdamW"],
            "epochs": {"low": 1, "high": 3},
            "mosaic": {"low": 0, "high": 1},
            "model_size": ["n", "s"],
        }
    )
    assert space["imgsz"] == {"choices": [64, 128]}  # each value once
    assert space["optimizer"] == {"choices": ["SGD", "AdamW"]}  # as Ultralytics spells them
    assert space["mosaic"] == {"low": 0.0, "high": 1.0, "log": False}
    assert space["epochs"] == {"low": 1, "high": 3, "log": False}


def test_a_point_becomes_the_jobs_parameters_and_the_costliest_is_the_largest():
    base = base_params(extra_args={"plots": False})
    params = trial_params(base, {"lr0": 0.01, "imgsz": 128, "model_size": "s", "mosaic": 0.5})
    assert (params.imgsz, params.model_size) == (128, "s")
    assert params.extra_args == {"plots": False, "lr0": 0.01, "mosaic": 0.5}
    space = space_clean({"model_size": ["s", "m", "n"], "imgsz": {"low": 64, "high": 192}})
    costliest = costliest_params(base, {**space, "epochs": {"low": 2, "high": 9}})
    assert (costliest.model_size, costliest.imgsz, costliest.epochs) == ("m", 192, 9)


def test_the_forms_box_of_further_arguments_is_yaml():
    assert space_parse("mixup: {low: 0, high: 0.3}\ncos_lr: [true, false]") == {
        "mixup": {"low": 0, "high": 0.3},
        "cos_lr": [True, False],
    }
    with pytest.raises(ServiceError, match="one per line"):
        space_parse("- a list")
