# shlib.bash — helpers sourced by the shell tests (tests/*.sh): a temp dir $T removed on exit, pass/fail
# counters, has DESC FILE REGEX, and expect CODE DESC CMD... (runs CMD, checks its exit status; stdout/stderr kept in
# $T/out, $T/err), and examples_dir DIR (the scratch directory the help's and the docs' examples run in).
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

# examples_dir DIR: the files the help's and the docs' examples name, in DIR: Qwen3-VL-2B-Instruct/ (a tiny
# synthetic model), photo.jpg, page.png, clip.mp4, frames/ (five PNGs), and bin/qvl ($QVL, absolute). Needs $QVL
# and $SRC (absolute).
examples_dir() {
    mkdir -p "$1/frames" "$1/bin" || return 1
    ln -sf "$QVL" "$1/bin/qvl"
    "$QVL" synth --preset tiny --seed 1 --layout hf -o "$1/Qwen3-VL-2B-Instruct" >/dev/null &&
        cp "$SRC/tests/data/photos/rocket.jpg" "$1/photo.jpg" &&
        cp "$SRC/tests/data/photos/chelsea.png" "$1/page.png" &&
        cp "$SRC/tests/data/video/video_testsrc_30.mp4" "$1/clip.mp4" &&
        for f in 0 1 2 3 4; do cp "$SRC/tests/data/video/frames/video_frame_$f.png" "$1/frames/" || return 1; done
}
