#!/usr/bin/env bash
# Runs this recipe through the vramfit runner. Arguments pass through:
#   ./launch.sh --dry-run    ./launch.sh --smoke    ./launch.sh per_device_train_batch_size=2 gradient_accumulation_steps=8
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
vramfit="$root/.venv/bin/vramfit"
if [ ! -x "$vramfit" ]; then
  if [ -f "$root/Makefile" ]; then make -C "$root" venv; else vramfit="$(command -v vramfit)"; fi
fi
exec "$vramfit" run "$here" "$@"
