import os
import re

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import reverse


@pytest.mark.django_db
def test_the_seeded_superuser_signs_in_without_a_confirmation_mail(tmp_path, mailoutbox):
    out = tmp_path / "seed.txt"
    with out.open("w") as f:
        call_command("seed_demo", stdout=f)
    password = re.search(r"Password \(shown once\): (\S+)", out.read_text()).group(1)
    client = Client()
    response = client.post(
        reverse("account_login"), {"login": "admin@example.com", "password": password}
    )
    assert response.status_code == 302
    assert response["Location"] != reverse("account_email_verification_sent")
    assert client.get("/").status_code == 302  # signed in: home sends on to a workspace
    assert mailoutbox == []
    call_command("seed_demo", stdout=open(os.devnull, "w"))  # noqa: SIM115 - again: harmless
