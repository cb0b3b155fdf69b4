import pytest

from tests.annotation.weights import confident_weights_save
from tests.training.factories import trained_model_row


@pytest.fixture(scope="session")
def confident_weights(tmp_path_factory):
    return confident_weights_save(tmp_path_factory.mktemp("weights") / "confident.pt")


@pytest.fixture
def trained_model(team, confident_weights):
    """A detect model of the team's workspace, sure that everything is class 0, "bird"."""
    return trained_model_row(
        workspace=team.workspace,
        class_names=["bird", "nest"],
        weights=confident_weights.read_bytes(),
    )
