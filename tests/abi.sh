#!/usr/bin/env bash
# abi.sh — the exported surface of this build's libraries: libqvl.so and libqvl.a define only qvl_* global
# symbols (everything internal is hidden, and localized in the prelinked archive), and every QVL_API function
# declared in include/qvl.h is exported by both, and nothing else is. Environment: QVL_BUILD_DIR, QVL_SOURCE_DIR.
# Needs binutils (nm, or $NM for a cross build).
set -u
SRC=${QVL_SOURCE_DIR:-.}
BUILD=${QVL_BUILD_DIR:-build}
T_PREFIX=qvl-abi
# shellcheck source=shlib.bash
source "$(dirname "${BASH_SOURCE[0]}")/shlib.bash"
NM=${NM:-nm}
SO=$BUILD/libqvl.so
AR=$BUILD/libqvl.a

# The functions qvl.h exports: the name before the first '(' of each line that starts with QVL_API.
sed -n 's/^QVL_API[^(]*[^A-Za-z0-9_]\([A-Za-z_][A-Za-z0-9_]*\)(.*/\1/p' "$SRC/include/qvl.h" | sort -u >"$T/declared"
n_decl=$(wc -l <"$T/declared")
cp "$T/declared" "$T/required"
if ((n_decl >= 30)); then ok; else bad "only $n_decl QVL_API functions parsed from qvl.h"; fi
if [[ $(grep -c '^QVL_API' "$SRC/include/qvl.h") -eq $n_decl ]]; then ok; else
    bad "qvl.h: $(grep -c '^QVL_API' "$SRC/include/qvl.h") QVL_API lines, $n_decl names parsed"
fi

# only_qvl DESC FILE: every defined global symbol in FILE (nm output: value type name) starts with qvl_.
only_qvl() {
    awk 'NF >= 3 && $2 ~ /^[A-Z]$/ && $2 != "U" && $2 != "w" && $2 != "v" {print $3}' "$2" | sort -u >"$T/globals"
    grep -v '^qvl_' "$T/globals" >"$T/foreign"
    if [[ -s $T/globals && ! -s $T/foreign ]]; then ok; else
        bad "$1 defines $(wc -l <"$T/foreign") global symbols outside qvl_*: $(head -n 10 "$T/foreign" | tr '\n' ' ')"
    fi
}

if [[ -f $SO ]]; then
    "$NM" -D --defined-only "$SO" >"$T/so.nm" || bad "nm -D $SO"
    only_qvl "libqvl.so" "$T/so.nm"
    awk 'NF >= 3 && ($2 == "T" || $2 == "i") {print $3}' "$T/so.nm" | sed 's/@.*//' | sort -u >"$T/exported"
    comm -23 "$T/required" "$T/exported" >"$T/missing"
    if [[ ! -s $T/missing ]]; then ok; else bad "declared QVL_API but not exported: $(tr '\n' ' ' <"$T/missing")"; fi
    comm -13 "$T/declared" "$T/exported" >"$T/extra"
    if [[ ! -s $T/extra ]]; then ok; else bad "exported functions qvl.h does not declare QVL_API: $(tr '\n' ' ' <"$T/extra")"; fi
    echo "abi.sh: libqvl.so exports $(wc -l <"$T/exported") functions, qvl.h declares $n_decl"
else
    echo "abi.sh: no $SO (QVL_BUILD_SHARED=OFF), shared library not checked"
fi
if [[ -f $AR ]]; then
    "$NM" -g --defined-only "$AR" >"$T/a.nm" 2>/dev/null || bad "nm -g $AR"
    only_qvl "libqvl.a" "$T/a.nm"
    # The archive's global functions are the same set as the shared library's.
    awk 'NF >= 3 && $2 == "T" {print $3}' "$T/a.nm" | sort -u >"$T/a_funcs"
    comm -3 "$T/required" "$T/a_funcs" >"$T/a_diff"
    if [[ ! -s $T/a_diff ]]; then ok; else bad "libqvl.a functions differ from qvl.h's: $(tr '\n\t' '  ' <"$T/a_diff")"; fi
else
    echo "abi.sh: no $AR (QVL_BUILD_STATIC=OFF), static library not checked"
fi

echo "abi.sh: $pass passed, $fail failed"
((fail == 0))
