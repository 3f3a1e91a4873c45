#!/usr/bin/env bash
# Makes .venv-peers: an interpreter for the peers whose compiled parts need another torch.
# torchrl 0.14's C++ extension (its segment trees) is built against torch 2.14 and fails
# to load beside the torch 2.13 CPU wheel our main environment uses; this environment pairs
# it with the torch it was built for. Then:
#   apex bench replay --peer-python torchrl=.venv-peers/bin/python
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv-peers
.venv-peers/bin/pip install --quiet --upgrade pip
.venv-peers/bin/pip install --quiet "torch==2.14.1" "torchrl==0.14.1" "numpy" "cpprb"
.venv-peers/bin/python -c "from torchrl.data import PrioritizedReplayBuffer, LazyTensorStorage; PrioritizedReplayBuffer(alpha=0.6, beta=0.4, storage=LazyTensorStorage(8)); print('torchrl peer environment ready')"
