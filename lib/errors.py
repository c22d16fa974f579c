"""The failures a person running the project can fix, as one typed hierarchy.

Every such failure is a :class:`UserError`: its message says what went wrong and (mostly) what to
do, and the class says how the console shows it, so :mod:`runner.failures` needs no list of class
names. Anything else is a bug or the machine's (a full disk, Ctrl-C). This module imports nothing
of lib, so the ground floor's own errors derive from it.
"""

from __future__ import annotations


class UserError(Exception):
    """A failure that its message explains: the console shows its first line, named by its class
    (``ModelError: ...``), then :attr:`hint` when the class has one; the traceback goes to the log."""

    hint: str = ""       # what to do, when the messages of the class do not say it themselves
    plain: bool = False  # raised in the runner: the whole message is the report (no class name, no log file)
    named: bool = True   # the console line names the class

    @classmethod
    def console(cls, text: str) -> str:
        """The console's line for a failure of this class with message ``text``."""
        first = text.strip().splitlines()[0] if text.strip() else ""
        line = f"{cls.__name__}: {first}" if cls.named else first
        return f"{line} ({cls.hint})" if cls.hint else line


def user_errors(base: type[UserError] = UserError) -> dict[str, type[UserError]]:
    """{class name: class} of every subclass of ``base`` defined so far (imported modules only)."""
    out: dict[str, type[UserError]] = {}
    for sub in base.__subclasses__():
        out[sub.__name__] = sub
        out.update(user_errors(sub))
    return out
