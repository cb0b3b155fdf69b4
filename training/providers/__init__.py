"""Where trainers run. Each provider gets a machine, starts the trainer on it, tells whether it
is alive, and ends it; the supervising task (training.process.supervisor) does the rest the same way
for all of them."""

from django.conf import settings

from training.providers.base import Machine, Provider, ProviderError, TrainerHandle
from training.services.catalog import provider_name


def provider_for(key: str) -> Provider:
    if key not in settings.TRAINING_PROVIDERS:
        raise ProviderError(f"The {provider_name(key)} provider is not configured on this server.")
    if key == "local":
        from training.providers.local import LocalProvider

        return LocalProvider()
    if key == "skypilot":
        from training.providers import sky_sdk

        if not sky_sdk.installed():
            raise ProviderError(
                "SkyPilot is not installed on this server: pip install -e '.[cloud]'"
            )
        from training.providers.skypilot import SkyPilotProvider

        return SkyPilotProvider()
    if key == "command":
        from training.providers.command import CommandProvider

        return CommandProvider()
    raise ProviderError(f"There is no {provider_name(key)} provider in this version.")


__all__ = ["Machine", "Provider", "ProviderError", "TrainerHandle", "provider_for"]
