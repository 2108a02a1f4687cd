"""scripts/measure-tensor-layout.py, the tool that measures a torch's TensorImpl layout in
its own process (for a torch evmbpf does not know yet, such as the GPU machine's 2.11):
checked against the layouts the table in user/collector/session/objects.c holds, on the
host's torch 1.13 and, where built, trixie's 2.6 and sid's 2.14. Each must print exactly
its table line."""
import os
import re
import subprocess

import pytest

from evmbpf_testlib import HOST_PYTHON, ROOT, chroot_dir, chroot_target

pytestmark = pytest.mark.root  # the chroots

SCRIPT = os.path.join(ROOT, "scripts", "measure-tensor-layout.py")


def table_layouts():
    with open(os.path.join(ROOT, "user", "collector", "session", "objects.c")) as handle:
        text = handle.read()
    table = text[text.index("tensor_layouts[TENSOR_LAYOUTS] = {"):]
    table = table[:table.index("\n};")]
    return {re.sub(r"\s+", " ", m) for m in re.findall(r"\{ \.impl_off[^}]*\}", table)}


@pytest.mark.parametrize("where", ["host", "trixie", "sid"])
def test_measures_the_known_layouts(where):
    if where == "host":
        cmd = [HOST_PYTHON, SCRIPT]
    else:
        if not chroot_dir(where):
            pytest.skip(f"the {where} chroot is not built (scripts/chroot.sh ensure {where})")
        target = chroot_target(where)
        cmd = target.prefix + [target.python, target.guest(SCRIPT)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    printed = re.findall(r"\{ \.impl_off[^}]*\}", r.stdout)
    assert len(printed) == 1, r.stdout
    assert re.sub(r"\s+", " ", printed[0]) in table_layouts(), (r.stdout, table_layouts())
