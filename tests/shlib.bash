# shlib.bash — helpers sourced by the shell tests (tests/*.sh): a temp dir $T removed on exit, pass/fail
# counters, has DESC FILE REGEX, and expect CODE DESC CMD... (runs CMD, checks its exit status; stdout/stderr kept in
# $T/out, $T/err).
# Usage: T_PREFIX=name source "$(dirname "$0")/shlib.bash"
T=$(mktemp -d "${TMPDIR:-/tmp}/${T_PREFIX:-qvl-test}-XXXXXX")
trap 'rm -rf "$T"' EXIT
pass=0
fail=0
ok() { pass=$((pass + 1)); }
bad() {
    fail=$((fail + 1))
    echo "FAIL: $*" >&2
}
has() { # has DESC FILE REGEX: FILE matches the extended regex
    if grep -Eq "$3" "$2"; then ok; else
        bad "$1: $(basename "$2") lacks /$3/"
        sed 's/^/    /' "$2" | head -30 >&2
    fi
}
expect() {
    local want=$1 desc=$2
    shift 2
    "$@" >"$T/out" 2>"$T/err"
    local rc=$?
    if [[ $rc -eq $want ]]; then ok; else
        bad "$desc: exit $rc, want $want"
        sed 's/^/    /' "$T/err" | head -8 >&2
    fi
}
