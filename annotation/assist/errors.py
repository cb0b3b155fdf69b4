"""The one exception the helpers raise."""


class AssistError(Exception):
    """The helper could not give an answer; str() is a sentence to show the user."""
