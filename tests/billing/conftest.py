import pytest

from tests.training.factories import job_row, local_gpu, small_version
from tests.workspaces.factories import ProjectFactory


class Jobs:
    """Training job rows of the team's workspace (never run: the ledger only needs their ids)."""

    def __init__(self, team):
        access = team.access("owner")
        self.project = ProjectFactory(workspace=team.workspace, name="Metered")
        self.version = small_version(access=access, name="Metered data")
        self.gpu = local_gpu()
        self.user = team.owner

    def new(self, **fields):
        return job_row(
            project=self.project, version=self.version, gpu=self.gpu, user=self.user, **fields
        )


@pytest.fixture
def jobs(team) -> Jobs:
    return Jobs(team)
