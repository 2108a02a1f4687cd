"""Processes for tests/test_faults_processes.py: the parent runs forwards, an os.fork() child runs
forwards of the same model (at the same addresses), and a DataLoader with two worker
processes calls the model from its dataset. Only the parent's forwards are to be traced."""
import json
import os
import sys
import threading

import torch
from torch.utils.data import DataLoader, Dataset

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import fault_model  # noqa: E402


class ModelDataset(Dataset):
    def __init__(self, model, pids_dir):
        self.model, self.pids_dir = model, pids_dir

    def __len__(self):
        return 8

    def __getitem__(self, index):
        open(os.path.join(self.pids_dir, str(os.getpid())), "w").close()
        with torch.no_grad():
            return self.model(torch.full((1, 4), float(index)))[0]


def build():
    return fault_model.build()


def run(model):
    import tempfile
    pids_dir = tempfile.mkdtemp(prefix="evmbpf-forks-")
    parent = 0
    for step in range(3):
        model(fault_model.inputs(step))
        parent += 1
    pid = os.fork()
    if pid == 0:
        for step in range(5):
            model(fault_model.inputs(step))
        os._exit(0)
    children = [pid]
    os.waitpid(pid, 0)
    for step in range(2):
        model(fault_model.inputs(step))
        parent += 1
    loader = DataLoader(ModelDataset(model, pids_dir), batch_size=2, num_workers=2)
    for batch in loader:
        model(fault_model.inputs(int(batch.sum()) % 7))
        parent += 1
    workers = [int(p) for p in os.listdir(pids_dir)]
    children += workers
    print("forks " + json.dumps({"main_tid": threading.get_native_id(), "children": children,
                                 "parent_forwards": parent, "child_forwards": 5 + 8}),
          file=sys.stderr, flush=True)
