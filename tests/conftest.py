import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from evmbpf_testlib import EVMBPF  # noqa: E402


def pytest_collection_modifyitems(config, items):
    needs_root = pytest.mark.skip(reason="needs root: the tracer loads BPF programs")
    for item in items:
        if "root" in item.keywords and os.geteuid() != 0:
            item.add_marker(needs_root)


def pytest_configure(config):
    config.addinivalue_line("markers", "root: loads BPF programs, needs root")
    config.addinivalue_line("markers", "slow: long-running; deselect with -m 'not slow'")


@pytest.fixture(scope="session")
def evmbpf():
    if not os.access(EVMBPF, os.X_OK):
        pytest.fail(f"{EVMBPF} is not built: run make")
    return EVMBPF
