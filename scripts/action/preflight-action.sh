#!/usr/bin/env bash
# The steps of the preflight GitHub Action (action.yml), kept in a script so they can be tested.
#
#   preflight-action.sh run           install preflight into a venv of its own (unless
#                                     PREFLIGHT_SKIP_INSTALL=1), run it,
#                                     record its outputs in $GITHUB_OUTPUT, make sure the step summary
#                                     is complete. Exits 0 so the upload step runs, except when the
#                                     exit code and this run's results.json disagree (then 1).
#   preflight-action.sh gate          exit with preflight's own exit code (PREFLIGHT_EXIT_CODE, the
#                                     run step's output): fails the job on NO-GO (1), usage errors (2),
#                                     INCOMPLETE (3) or an interrupted run (130).
#   preflight-action.sh install-spec  print what `run` would pip install.
#
# Every output comes from the invocation that just ran: the report files an earlier run left in the
# report directory are removed before preflight starts, and the verdict is the exit code's
# (0 GO, 1 NO-GO, 3 INCOMPLETE, 4 SUBSET-GO, 130 INTERRUPTED, anything else ERROR), checked against the
# results.json this run wrote (scripts/action/action_lib.py).
#
# Inputs come as environment variables, as GitHub passes them to composite steps:
#   INPUT_ARGS        extra arguments for `preflight run`, split like a shell would (no expansion)
#   INPUT_NODES       hosts file (optional)        INPUT_CONFIG    preflight.toml (optional)
#   INPUT_BASELINE    results.json of the last known-good run (optional)
#   INPUT_PROFILE     node-type profile (optional) INPUT_REPORT_DIR  default preflight-report
#   INPUT_VERSION     install preflight-cluster==VERSION from the package index (optional)
#   INPUT_INSTALL     pip requirement to install instead (optional; default: the action's own checkout)
#   INPUT_PYTHON      interpreter that makes the venv preflight is installed into (default python3;
#                     the venv sees its packages)
set -uo pipefail

mode="${1:?usage: preflight-action.sh run|gate|install-spec}"
here="$(cd "$(dirname "$0")/../.." && pwd)"
lib="$here/scripts/action/action_lib.py"
report_dir="${INPUT_REPORT_DIR:-preflight-report}"
python="${INPUT_PYTHON:-python3}"
distribution=preflight-cluster
# Every file `preflight run --out DIR` writes (preflight/outdir.py, preflight/reporters/).
report_files=(results.jsonl results.json report.md report.html junit.xml preflight.prom)

output() {  # name value
    if [ -n "${GITHUB_OUTPUT:-}" ]; then printf '%s=%s\n' "$1" "$2" >>"$GITHUB_OUTPUT"; fi
}

summary() {  # printf arguments
    # shellcheck disable=SC2059
    if [ -n "${GITHUB_STEP_SUMMARY:-}" ]; then printf "$@" >>"$GITHUB_STEP_SUMMARY"; fi
}

install_spec() {  # prints the pip requirement; returns 2 with a message for inputs that do not fit
    local version="${INPUT_VERSION:-}" install="${INPUT_INSTALL:-}"
    if [ -n "$version" ] && [ -n "$install" ]; then
        echo "give either the version or the install input, not both" >&2
        return 2
    fi
    if [ -n "$version" ]; then
        if ! [[ "$version" =~ ^[0-9][0-9A-Za-z.+!_-]*$ ]]; then
            echo "version $version is not a release number (e.g. 0.1.0)" >&2
            return 2
        fi
        echo "$distribution==$version"
    elif [ -n "$install" ]; then
        if [[ "$install" == -* ]]; then
            echo "install must be a requirement or a path, not a pip option: $install" >&2
            return 2
        fi
        echo "$install"
    else
        echo "${GITHUB_ACTION_PATH:-$here}"
    fi
}

no_run() {  # message: nothing ran; the gate step fails the job with code 2 after the upload step
    echo "::error::${1%%$'\n'*}"
    output exit-code 2
    output verdict ERROR
    output report-dir "$report_dir"
    output results-json ""
    summary '## preflight did not run\n\n%s\n' "$1"
    exit 0
}

last_lines() {  # file: its last lines, as a fenced block for the step summary
    printf '\n```\n%s\n```\n' "$(tail -n 15 -- "$1")"
}

install_into_venv() {  # spec: preflight in a venv of its own, made with $python; python= its interpreter
    # A venv, because a Debian or Ubuntu system Python refuses `pip install` (PEP 668, externally
    # managed); --system-site-packages, so the frameworks that Python has are the ones measured.
    local venv="${RUNNER_TEMP:-${TMPDIR:-/tmp}}/preflight-venv" log
    log="$(mktemp "${RUNNER_TEMP:-${TMPDIR:-/tmp}}/preflight-install.XXXXXX")" || no_run "no room for a temporary file"
    rm -rf -- "$venv"
    if ! "$python" -m venv --system-site-packages "$venv" >"$log" 2>&1; then
        echo "::error::could not make a virtual environment with $python"
        cat -- "$log"
        no_run "could not make a virtual environment with \`$python -m venv\` (on Debian or Ubuntu: \`apt-get install python3-venv\`, or set the python input to an interpreter that has venv):$(last_lines "$log")"
    fi
    if ! "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$spec" >"$log" 2>&1; then
        cat -- "$log"
        no_run "could not install preflight ($spec) into $venv with pip:$(last_lines "$log")"
    fi
    rm -f -- "$log"
    python="$venv/bin/python"
}

case "$mode" in
install-spec)
    install_spec
    ;;
run)
    spec="$(install_spec 2>&1)" || no_run "$spec"
    if [ "${PREFLIGHT_SKIP_INSTALL:-0}" != 1 ]; then
        install_into_venv "$spec"
    fi

    args=(run --out "$report_dir")
    [ -n "${INPUT_NODES:-}" ] && args+=(--nodes "$INPUT_NODES")
    [ -n "${INPUT_CONFIG:-}" ] && args+=(--config "$INPUT_CONFIG")
    [ -n "${INPUT_PROFILE:-}" ] && args+=(--profile "$INPUT_PROFILE")
    [ -n "${INPUT_BASELINE:-}" ] && args+=(--baseline "$INPUT_BASELINE")
    if [ -n "${INPUT_ARGS:-}" ]; then
        split="$(mktemp "${RUNNER_TEMP:-${TMPDIR:-/tmp}}/preflight-args.XXXXXX")" || no_run "no room for a temporary file"
        if ! "$python" "$lib" split-args "$INPUT_ARGS" >"$split" 2>"$split.err"; then
            problem="$(cat "$split.err")"
            rm -f -- "$split" "$split.err"
            no_run "${problem:-the args input cannot be split}"
        fi
        mapfile -d '' -t extra <"$split"
        rm -f -- "$split" "$split.err"
        args+=("${extra[@]}")
    fi

    # One invocation, one set of reports: nothing an earlier run left may be read as this run's.
    mkdir -p -- "$report_dir" || no_run "report directory $report_dir cannot be made"
    if [ -n "${INPUT_BASELINE:-}" ] && [ -e "$INPUT_BASELINE" ]; then
        baseline_dir="$(cd "$(dirname -- "$INPUT_BASELINE")" && pwd -P)"
        baseline_name="$(basename -- "$INPUT_BASELINE")"
        if [ "$baseline_dir" = "$(cd "$report_dir" && pwd -P)" ] && [[ " ${report_files[*]} " == *" $baseline_name "* ]]; then
            no_run "the baseline $INPUT_BASELINE is in report-dir $report_dir, where this run replaces the reports; keep it elsewhere"
        fi
    fi
    for f in "${report_files[@]}"; do
        rm -f -- "${report_dir:?}/$f"
        if [ -e "$report_dir/$f" ] || [ -L "$report_dir/$f" ]; then
            no_run "$report_dir/$f, left by an earlier run, cannot be removed"
        fi
    done

    echo "preflight ${args[*]}"
    "$python" -m preflight "${args[@]}"
    code=$?

    results="$report_dir/results.json"
    [ -f "$results" ] || results=""
    judged="$("$python" "$lib" judge "$code" "$results")"
    verdict="${judged%%$'\n'*}"
    problem=""
    [[ "$judged" == *$'\n'* ]] && problem="${judged#*$'\n'}"
    if [ -z "$verdict" ]; then
        verdict=ERROR
        problem="the verdict of exit code $code could not be worked out"
    fi
    [ -n "$problem" ] && verdict=ERROR

    output exit-code "$code"
    output verdict "$verdict"
    output report-dir "$report_dir"
    output results-json "$results"
    # preflight appends its Markdown summary itself; if it never got that far, say why.
    if [ -z "$results" ]; then
        summary '## preflight did not produce a report\n\n`preflight run` exited with code %s (%s) before writing results.json; see the job log.\n' "$code" "$verdict"
    fi
    if [ -n "$problem" ]; then
        summary '## preflight: exit code and report disagree\n\n%s\n' "$problem"
        echo "::error::preflight: $problem"
        exit 1
    fi
    missing=()
    for f in results.jsonl results.json report.md report.html junit.xml; do
        [ -f "$report_dir/$f" ] || missing+=("$f")
    done
    if [ -n "$results" ] && [ "${#missing[@]}" -gt 0 ]; then
        echo "::warning::report directory $report_dir lacks ${missing[*]} (was --format narrowed?)"
    fi
    echo "preflight verdict: $verdict (exit code $code); reports in $report_dir"
    exit 0
    ;;
gate)
    code="${PREFLIGHT_EXIT_CODE:-}"
    verdict="${PREFLIGHT_VERDICT:-}"
    if ! [[ "$code" =~ ^[0-9]+$ ]]; then
        echo "::error::preflight: the run step recorded no exit code"
        exit 1
    fi
    case "$code" in
        0) if [ "$verdict" != GO ]; then
               echo "::error::preflight: exit code 0 but verdict ${verdict:-(none)}"
               exit 1
           fi
           echo "preflight: GO" ;;
        1) echo "::error::preflight: NO-GO, the cluster is not ready to train (see the report artifact)" ;;
        2) echo "::error::preflight: usage or configuration error, nothing ran" ;;
        3) echo "::error::preflight: INCOMPLETE, no verdict could be reached" ;;
        4) echo "::error::preflight: GO on a subset of the nodes only (--shape): the report names the nodes to exclude" ;;
        130) echo "::error::preflight: interrupted; the report artifact holds what finished" ;;
        *) echo "::error::preflight: exited with code $code" ;;
    esac
    exit "$code"
    ;;
*)
    echo "usage: preflight-action.sh run|gate|install-spec" >&2
    exit 2
    ;;
esac
