#!/usr/bin/env bash
# The steps of the preflight GitHub Action (action.yml), kept in a script so they can be tested.
#
#   preflight-action.sh run    install preflight (unless PREFLIGHT_SKIP_INSTALL=1), run it, record
#                              the verdict in $GITHUB_OUTPUT, make sure the step summary and the
#                              report directory are complete. Always exits 0, so the upload step runs.
#   preflight-action.sh gate   exit with preflight's own exit code: fails the job on NO-GO (1),
#                              usage errors (2), INCOMPLETE (3) or an interrupted run (130).
#
# Inputs come as environment variables, as GitHub passes them to composite steps:
#   INPUT_ARGS        extra arguments for `preflight run`, split like a shell would (no expansion)
#   INPUT_NODES       hosts file (optional)        INPUT_CONFIG    preflight.toml (optional)
#   INPUT_BASELINE    results.json of the last known-good run (optional)
#   INPUT_PROFILE     node-type profile (optional) INPUT_REPORT_DIR  default preflight-report
#   INPUT_INSTALL     what to pip install (default: the action's own checkout)
#   INPUT_PYTHON      interpreter to install into (default python3)
set -uo pipefail

mode="${1:?usage: preflight-action.sh run|gate}"
report_dir="${INPUT_REPORT_DIR:-preflight-report}"
state_file="${RUNNER_TEMP:-${TMPDIR:-/tmp}}/preflight-action-exit-code"

output() {  # name value
    if [ -n "${GITHUB_OUTPUT:-}" ]; then printf '%s=%s\n' "$1" "$2" >>"$GITHUB_OUTPUT"; fi
}

case "$mode" in
run)
    python="${INPUT_PYTHON:-python3}"
    here="$(cd "$(dirname "$0")/../.." && pwd)"
    if [ "${PREFLIGHT_SKIP_INSTALL:-0}" != 1 ]; then
        "$python" -m pip install --quiet "${INPUT_INSTALL:-$here}" || { echo "::error::could not install preflight"; output exit-code 2; echo 2 >"$state_file"; exit 0; }
    fi
    args=(run --out "$report_dir")
    [ -n "${INPUT_NODES:-}" ] && args+=(--nodes "$INPUT_NODES")
    [ -n "${INPUT_CONFIG:-}" ] && args+=(--config "$INPUT_CONFIG")
    [ -n "${INPUT_PROFILE:-}" ] && args+=(--profile "$INPUT_PROFILE")
    [ -n "${INPUT_BASELINE:-}" ] && args+=(--baseline "$INPUT_BASELINE")
    if [ -n "${INPUT_ARGS:-}" ]; then
        # Split the free-form input with Python's shlex: quotes are honoured, nothing is expanded.
        mapfile -t extra < <("$python" -c 'import shlex, sys; print("\n".join(shlex.split(sys.argv[1])))' "$INPUT_ARGS")
        args+=("${extra[@]}")
    fi
    echo "preflight ${args[*]}"
    "$python" -m preflight "${args[@]}"
    code=$?
    echo "$code" >"$state_file"
    output exit-code "$code"
    output report-dir "$report_dir"
    verdict=$("$python" - "$report_dir/results.json" <<'PY'
import json, sys
try:
    print(json.load(open(sys.argv[1]))["verdict"]["verdict"])
except Exception:
    print("NONE")
PY
)
    output verdict "$verdict"
    # preflight appends its Markdown summary itself; if it never got that far, say why.
    if [ -n "${GITHUB_STEP_SUMMARY:-}" ] && [ "$verdict" = NONE ]; then
        printf '## preflight did not produce a report\n\n`preflight run` exited with code %s before writing results.json; see the job log.\n' "$code" >>"$GITHUB_STEP_SUMMARY"
    fi
    missing=()
    for f in results.jsonl results.json report.md report.html junit.xml; do
        [ -f "$report_dir/$f" ] || missing+=("$f")
    done
    if [ "$verdict" != NONE ] && [ "${#missing[@]}" -gt 0 ]; then
        echo "::warning::report directory $report_dir lacks ${missing[*]} (was --format narrowed?)"
    fi
    echo "preflight verdict: $verdict (exit code $code); reports in $report_dir"
    exit 0
    ;;
gate)
    code="$(cat "$state_file" 2>/dev/null || echo 3)"
    case "$code" in
        0) echo "preflight: GO" ;;
        1) echo "::error::preflight: NO-GO, the cluster is not ready to train (see the report artifact)" ;;
        2) echo "::error::preflight: usage or configuration error, nothing ran" ;;
        3) echo "::error::preflight: INCOMPLETE, no verdict could be reached" ;;
        *) echo "::error::preflight: exited with code $code" ;;
    esac
    exit "$code"
    ;;
*)
    echo "usage: preflight-action.sh run|gate" >&2
    exit 2
    ;;
esac
