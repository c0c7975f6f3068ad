"""User-facing errors: the CLI prints them as one line and exits non-zero, never a traceback."""


class OFAError(Exception):
    """A problem with the user's input (recipe, arch, table, checkpoint, flag)."""


class SpaceError(OFAError, ValueError):
    """An arch or space definition that does not fit; the message names the field."""
