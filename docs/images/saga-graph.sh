#!/usr/bin/env bash
# Draws docs/images/saga-graph.svg from a real demo saga: runs `sagacity demo` (its first act)
# against SAGACITY_DATABASE_URL, keeps the saga's journal beside the picture (saga-graph.json),
# and draws that journal with `sagacity saga graph`. tests/docs/test_saga_graph_image.py checks
# that the journal verifies and that the picture is what it draws.
set -euo pipefail
: "${SAGACITY_DATABASE_URL:?set it to a Postgres the demo may use: its journal must outlive it}"
here=$(dirname "$0")
saga=$(sagacity demo --no-crash --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["saga_id"])')
sagacity saga journal "$saga" --json >"$here/saga-graph.json"
sagacity saga graph "$saga" --journal "$here/saga-graph.json" --format svg --output "$here/saga-graph.svg"
echo "drew saga $saga: $here/saga-graph.svg"
