"""The agent's two exceptions: a refusal (one line for the person) and a stop (an interrupt)."""


class Refused(Exception):
    """The request, the payload or the lane's state is refused; the message is the one line why."""


class Stopped(Exception):
    """The run was asked to stop (a signal on the lane, a stop request, a closed connection)."""
