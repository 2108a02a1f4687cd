from . import hooks  # noqa: F401
