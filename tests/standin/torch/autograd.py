"""Grad-mode context managers: they only keep a flag."""
import functools

_enabled = [True]


def is_grad_enabled():
    return _enabled[-1]


class _GradMode:
    mode = True

    def __enter__(self):
        _enabled.append(self.mode)
        return None

    def __exit__(self, *exc):
        _enabled.pop()
        return False

    def __call__(self, func):
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            with self.__class__():
                return func(*args, **kwargs)

        return wrapper


class no_grad(_GradMode):
    mode = False


class enable_grad(_GradMode):
    mode = True


class inference_mode(_GradMode):
    def __init__(self, mode=True):
        self.mode = not mode


class set_grad_enabled(_GradMode):
    def __init__(self, mode):
        self.mode = bool(mode)
        _enabled.append(self.mode)  # takes effect at once, like torch's

    def __enter__(self):
        return None

    def __exit__(self, *exc):
        _enabled.pop()
        return False
