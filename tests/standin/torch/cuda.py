"""No devices here."""


def is_available():
    return False


def device_count():
    return 0


def synchronize(device=None):
    return None


def memory_allocated(device=None):
    return 0


def memory_reserved(device=None):
    return 0


def max_memory_allocated(device=None):
    return 0
