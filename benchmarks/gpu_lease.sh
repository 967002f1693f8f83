#!/usr/bin/env bash
# Every GPU measurement of the flash route in one command, for a GPU machine with JAX and without TensorFlow, in
# priority order, under a deadline (what finishes comes back; the rest is skipped and says so):
#   1. tests/layers/test_flash_dropout.py on the GPU (the Pallas kernels compiled by Triton: agreement with the exact
#      route given the same mask, forward and gradients; the mask's statistics; the layer on the route);
#   2. benchmarks/flash_dropout_speed.py: one GPT-2 small layer's attention, forward + backward, per route;
#   3. benchmarks/gpu_training.py, GPT-2 small (B 16 x T 1024, mixed_bfloat16), each side in its own process:
#      ours with the flash route, keras-hub and ours on the exact route at dropout 0.1, then dropout 0;
#   4. cached greedy generation against keras-hub, if time is left.
# Usage (repository root; keras, keras-hub, namex and optree wheels for Python 3.12 in .whl/; installs them and
# this project into /tmp/site):
#   OUT=/some/dir bash benchmarks/gpu_lease.sh
# Writes $OUT/log.txt, $OUT/flash_speed.json, $OUT/gpt_sides.json (one entry per side: gpu_training's side JSON)
# and $OUT/generate.json.
set -u
OUT=${OUT:?set OUT to the folder for the results}
DEADLINE=${DEADLINE:-470}  # seconds after which no new measurement starts
SIZE=${SIZE:-full}  # tiny: a rehearsal of this script on a CPU (with ATTNLAYERS_FLASH_INTERPRET=1)
start=$SECONDS
log() { echo "[$((SECONDS - start)) s] $*" | tee -a "$OUT/log.txt"; }
left() { echo $((DEADLINE - (SECONDS - start))); }

python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "${WHEELS:-.whl}"/*.whl \
  && python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --target /tmp/site . \
  || { log "install failed"; exit 1; }
export PYTHONPATH=/tmp/site:$PWD KERAS_BACKEND=jax XLA_FLAGS= PYTHONUNBUFFERED=1 TF_CPP_MIN_LOG_LEVEL=2
nvidia-smi -L >>"$OUT/log.txt" 2>&1
python3 -c "import jax, keras, keras_hub; print('jax', jax.__version__, jax.devices(), 'keras', keras.__version__, \
'keras_hub', keras_hub.__version__)" 2>&1 | tee -a "$OUT/log.txt"

log "1. flash kernel tests on the GPU"
JAX_DEFAULT_MATMUL_PRECISION=highest timeout 170 python3 -m pytest -q -p no:cacheprovider -rA tests/layers/test_flash_dropout.py 2>&1 \
  | tail -40 | tee -a "$OUT/log.txt"

log "2. attention speed per route"
timeout 100 python3 benchmarks/flash_dropout_speed.py --size "$SIZE" --json "$OUT/flash_speed.json" 2>&1 | grep -v "^W0000\|^I0000" \
  | tee -a "$OUT/log.txt"

mkdir -p /tmp/sides
side() {  # side NAME ROLE [gpu_training flags...]
  local name=$1 role=$2
  shift 2
  if [ "$(left)" -lt 60 ]; then log "skipped $name: deadline"; return; fi
  log "3. GPT-2 small, $name"
  local limit
  limit=$(left); [ "$limit" -gt 150 ] && limit=150
  timeout "$limit" python3 benchmarks/gpu_training.py --size "$SIZE" --steps 8 --parts gpt --side "$role" \
    --side-json "/tmp/sides/$name.json" "$@" 2>&1 | grep "^  \[gpt\]\|Error\|error" | tee -a "$OUT/log.txt"
  python3 - "$OUT/gpt_sides.json" <<'EOF'
import glob, json, os, sys
sides = {os.path.basename(p)[:-5]: json.load(open(p)) for p in sorted(glob.glob("/tmp/sides/*.json"))}
json.dump(sides, open(sys.argv[1], "w"), indent=1)
EOF
}
side ours_flash_d0.1 ours --dropout 0.1 --attention-implementation flash
side peer_d0.1 peer --dropout 0.1
side ours_exact_d0.1 ours --dropout 0.1 --attention-implementation auto
side ours_auto_d0_pad128 ours --dropout 0 --vocabulary-padding 128
side peer_d0 peer --dropout 0
side ours_flash_d0.1_pad128 ours --dropout 0.1 --attention-implementation flash --vocabulary-padding 128

if [ "$(left)" -gt 90 ]; then
  log "4. generation"
  timeout "$(left)" python3 benchmarks/gpu_training.py --size "$SIZE" --repeats 3 --parts generate \
    --json "$OUT/generate.json" 2>&1 | grep -v "^W0000\|^I0000" | tail -15 | tee -a "$OUT/log.txt"
else
  log "skipped generation: deadline"
fi
log "done"
