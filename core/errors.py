"""The one exception a service raises when a request cannot be carried out."""


class ServiceError(Exception):
    """A request that cannot be carried out, with a message a person can act on."""
