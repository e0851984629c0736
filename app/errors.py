"""Errors a user can act on; one module so every import path sees the same class."""


class UserError(Exception):
    """A mistake the user can fix: the message says what is wrong and what to do."""


def reason(exc: BaseException) -> str:
    """An exception as the end of a one-line message: its text, or for the many that have none
    (a timeout, most connection errors) what it means."""
    text = str(exc).strip()
    if text:
        return text
    if isinstance(exc, TimeoutError):
        return "no answer in time (is something other than Kafka listening there?)"
    return type(exc).__name__
