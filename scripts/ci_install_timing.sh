#!/usr/bin/env bash
# Times .ci/run's install block two ways in fresh virtual environments on this machine: pip for
# everything (as before) and pip for the pinned torch file then uv for the rest (as now), each with
# an empty download cache. Prints one line per step; `uptime` beside each run says the load.
# Usage: [TOOLS="pip uv"] bash scripts/ci_install_timing.sh [WORKDIR]   (needs PyPI; ~10 minutes)
set -euo pipefail
cd "$(dirname "$0")/.."
work="${1:-$(mktemp -d)}"
echo "torch==2.13.0" > "$work/constraints.txt"
cons="$work/constraints.txt"
extras=".[test,postgres,dashboard,exports,hf]"
engines=tests/data/serving_engines/requirements.txt

step() {  # step NAME COMMAND...: run it, print its seconds
    local t0=$SECONDS
    "${@:2}" >/dev/null 2>&1
    echo "  $1: $((SECONDS - t0)) s"
}

for tool in ${TOOLS:-pip uv}; do
    venv="$work/venv-$tool"
    rm -rf "$venv"
    echo "$tool ($(uptime | sed 's/.*load/load/'))"
    t0=$SECONDS
    python3 -m venv "$venv"
    # shellcheck disable=SC1091
    . "$venv/bin/activate"
    export PIP_NO_CACHE_DIR=1 UV_CACHE_DIR="$work/uv-cache-$tool"
    step "pip upgrade" python -m pip install --quiet --upgrade pip
    step "torch (pip)" python -m pip install --quiet -c "$cons" "torch==2.13.0"
    if [ "$tool" = pip ]; then
        step "project and extras (pip)" python -m pip install --quiet -c "$cons" -e "$extras"
        step "serving engines (pip)" python -m pip install --quiet --no-deps -r "$engines"
    else
        step "uv itself (pip)" python -m pip install --quiet "uv==0.13.9"
        step "project and extras (uv)" uv pip install --quiet --compile-bytecode -c "$cons" -e "$extras"
        step "serving engines (uv)" uv pip install --quiet --compile-bytecode --no-deps -r "$engines"
    fi
    python -m pip freeze --exclude-editable | sort > "$work/freeze-$tool.txt"
    echo "  total: $((SECONDS - t0)) s ($(uptime | sed 's/.*load/load/'))"
    deactivate
done
echo "packages that differ between the two environments:"
diff "$work/freeze-pip.txt" "$work/freeze-uv.txt" 2>/dev/null && echo "  none" || true
