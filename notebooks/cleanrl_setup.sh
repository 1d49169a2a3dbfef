#!/usr/bin/env bash
# CleanRL's PPO-TrXL as a third-party program for notebooks/cleanrl_compare.py, in DIR (outside the repo):
#   DIR/ppo_trxl.py, DIR/pom_env.py  CleanRL's script and the module it imports, at commit $CLEANRL_COMMIT
#   DIR/.venv                        its own venv: torch 2.13.0 (CPU), gymnasium 0.29.1, minigrid 2.5,
#                                    memory-gym 1.0.2 (--no-deps: the script imports it), einops, tyro,
#                                    tensorboard, pygame
# Usage: bash notebooks/cleanrl_setup.sh /work/cleanrl
# Nothing is installed into the project's .venv; an existing DIR/ppo_trxl.py is kept (copy it there by
# hand on a machine without network access).
set -euo pipefail

DIR=${1:?usage: bash notebooks/cleanrl_setup.sh DIR   (a directory outside the repository)}
CLEANRL_COMMIT=${CLEANRL_COMMIT:-fe8d8a03c41a7ef5b523e2e354bd01c363e786bb}
REPO=$(cd "$(dirname "$0")/.." && pwd -P)

DIR=$(realpath -m "$DIR")
case "$DIR/" in
  "$REPO"/*) echo "refusing: $DIR is inside the repository $REPO" >&2; exit 2 ;;
esac
mkdir -p "$DIR"

for file in ppo_trxl.py pom_env.py; do
  if [ ! -f "$DIR/$file" ]; then
    curl -fsSL -o "$DIR/$file" \
      "https://raw.githubusercontent.com/vwxyzjn/cleanrl/$CLEANRL_COMMIT/cleanrl/ppo_trxl/$file"
  fi
done

python3 -m venv "$DIR/.venv"
PIP="$DIR/.venv/bin/pip"
# torch pinned in every call, so that no later resolution swaps in another (CUDA) build
"$PIP" install torch==2.13.0
"$PIP" install torch==2.13.0 "gymnasium==0.29.1" "minigrid==2.5.*" "einops<0.8" "tyro<0.9" "tensorboard<3" pygame
"$PIP" install --no-deps memory-gym==1.0.2
"$DIR/.venv/bin/python" -c "import torch, gymnasium, minigrid; print('torch', torch.__version__, \
'gymnasium', gymnasium.__version__, 'minigrid', minigrid.__version__)"
