"""Errors a user can act on; one module so every import path sees the same class."""


class UserError(Exception):
    """A mistake the user can fix: the message says what is wrong and what to do."""
