#!/bin/sh
# Runs the agent benchmark from .devbench/ (made by bench/device/prepare.ts) with plain node, from the
# repository's root. Arguments are environment settings for bench/agents.ts (BENCH_AGENT_FLOOD=32 …).
set -e
HERE="$PWD"
WORK=/tmp/sextant-device
mkdir -p "$WORK"
[ -x "$WORK/node" ] || xz -dc .devbench/node.xz > "$WORK/node"
[ -x "$WORK/workerd" ] || xz -dc .devbench/workerd.xz > "$WORK/workerd"
chmod +x "$WORK/node" "$WORK/workerd"
[ -d "$WORK/edge" ] || tar -xJf .devbench/bundle.tar.xz -C "$WORK"
export PATH="$WORK:$PATH"
export MINIFLARE_WORKERD_PATH="$WORK/workerd"
export SEXTANT_PREBUILT_EDGE="$WORK/edge"
export SEXTANT_START_COMMAND="$WORK/node $WORK/start.mjs"
export SEXTANT_BUNDLES="$WORK"
export WRANGLER_SEND_METRICS=false
# The lent machine has no bubblewrap and runs nothing but this benchmark: its sandboxes use the
# `direct` driver, named here because npm start never picks it by itself (docs/agents.md, "Sandboxes").
export SEXTANT_SANDBOX_DRIVER="${SEXTANT_SANDBOX_DRIVER:-direct}"
cd "$HERE"
env "$@" "$WORK/node" "$WORK/bench-agents.mjs"
