"""PLACEHOLDER — to be written by the owner of this subcommand."""


def register(subparsers):
    pass
