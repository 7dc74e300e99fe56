#!/usr/bin/env bash
# install.sh — libqvl as another project sees it: `cmake --install` of this build tree into a temporary prefix
# (headers, libqvl.so.1 with its SONAME and links, libqvl.a, the CLI, qvl.pc, the CMake package), then
# tests/consumer/consumer.c built and run (a) by pkg-config against the shared library, (b) statically by
# pkg-config --static, (c) by find_package(qvl) with qvl::qvl and with qvl::qvl_static, (d) with the source tree
# as a subproject (add_subdirectory) linking qvl::qvl, whose compile options must not reach the parent's target.
# Environment: QVL_BUILD_DIR (this build), QVL_SOURCE_DIR, QVL_SANITIZE (1: skip (d), a second sanitized build).
set -u
SRC=${QVL_SOURCE_DIR:-.}
BUILD=${QVL_BUILD_DIR:-build}
T_PREFIX=qvl-install
# shellcheck source=shlib.bash
source "$(dirname "${BASH_SOURCE[0]}")/shlib.bash"
P=$T/prefix
CC=${CC:-cc}
# A sanitized library needs the sanitizer runtime in every program that links it.
SANFLAGS=()
[[ ${QVL_SANITIZE:-0} == 1 ]] && SANFLAGS=(-fsanitize=address,undefined)
JOBS=$(nproc 2>/dev/null || echo 2)

expect 0 "cmake --install" cmake --install "$BUILD" --prefix "$P"
LIBDIR=$(cd "$P" && ls -d lib*/libqvl.so 2>/dev/null | head -n 1 | xargs -r dirname)
LIBDIR=${LIBDIR:-lib}
for f in include/qvl.h "$LIBDIR"/libqvl.so "$LIBDIR"/libqvl.so.1 "$LIBDIR"/libqvl.a bin/qvl "$LIBDIR"/pkgconfig/qvl.pc \
    "$LIBDIR"/cmake/qvl/qvlConfig.cmake "$LIBDIR"/cmake/qvl/qvlConfigVersion.cmake "$LIBDIR"/cmake/qvl/qvlTargets.cmake; do
    if [[ -e $P/$f ]]; then ok; else bad "installed tree lacks $f"; fi
done
if [[ -L $P/$LIBDIR/libqvl.so && -L $P/$LIBDIR/libqvl.so.1 && $(readlink -f "$P/$LIBDIR/libqvl.so") == \
    "$(readlink -f "$P/$LIBDIR/libqvl.so.1")" ]]; then ok; else bad "libqvl.so and libqvl.so.1 are not links to one file"; fi
readelf -d "$P/$LIBDIR/libqvl.so" >"$T/dyn" 2>&1
has "SONAME" "$T/dyn" 'SONAME.*\[libqvl\.so\.1\]'
if [[ ${QVL_CROSS:-0} == 1 ]]; then
    # The consumers would have to be cross-compiled and emulated against the target's copies of every
    # dependency; the native build runs them.
    echo "install.sh: cross build: installed tree checked, consumers (a)-(d) skipped"
    echo "install.sh: $pass passed, $fail failed"
    ((fail == 0))
    exit
fi
expect 0 "installed qvl runs" "$P/bin/qvl" --version
has "installed qvl --version" "$T/out" '1\.[0-9]+\.[0-9]+'

export PKG_CONFIG_PATH=$P/$LIBDIR/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
expect 0 "pkg-config --modversion qvl" pkg-config --modversion qvl
has "qvl.pc version" "$T/out" '^1\.[0-9]+\.[0-9]+$'

# run_consumer DESC EXE: the consumer runs and prints its one line.
run_consumer() {
    mkdir -p "$T/run"
    expect 0 "$1: consumer runs" "$2" "$T/run/m-$(basename "$2")"
    has "$1: consumer output" "$T/out" '^consumer: libqvl 1\.[0-9]+\.[0-9]+, .* depth 2: 6 tokens'
}

# (a) shared, through pkg-config; run with the prefix's lib on the loader path.
read -r -a CFLAGS_QVL <<<"$(pkg-config --cflags qvl)"
read -r -a LIBS_QVL <<<"$(pkg-config --libs qvl)"
expect 0 "(a) cc with pkg-config --libs qvl" "$CC" "${SANFLAGS[@]}" -std=c11 -Wall -Werror "${CFLAGS_QVL[@]}" \
    "$SRC/tests/consumer/consumer.c" -o "$T/consumer_shared" "${LIBS_QVL[@]}" -lm
if [[ -x $T/consumer_shared ]]; then
    readelf -d "$T/consumer_shared" >"$T/dyn_a" 2>&1
    has "(a) consumer needs libqvl.so.1" "$T/dyn_a" 'NEEDED.*\[libqvl\.so\.1\]'
    LD_LIBRARY_PATH=$P/$LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} run_consumer "(a) shared" "$T/consumer_shared"
fi

# (b) static: libqvl.a with the private dependencies qvl.pc names. `pkg-config --static` also expands FFmpeg's own
# Libs.private (static archives of its ~40 optional codecs and protocols, which Debian's -dev packages do not all
# ship), so with video the dependencies are linked as shared libraries: qvl.pc's Requires.private by
# `pkg-config --libs` and its Libs.private; without video, `pkg-config --static --libs qvl` as it stands.
read -r -a SLIBS_ALL <<<"$(pkg-config --static --libs qvl)"
has_dep() { [[ " ${SLIBS_ALL[*]} " == *" $1 "* ]] && ok || bad "pkg-config --static --libs qvl lacks $1: ${SLIBS_ALL[*]}"; }
has_dep -lcjson
has_dep -lxxhash
has_dep -lnettle
SLIBS_QVL=()
if [[ ${QVL_VIDEO:-1} == 0 ]]; then
    for a in "${SLIBS_ALL[@]}"; do [[ $a == -lqvl ]] || SLIBS_QVL+=("$a"); done
else
    read -r -a SLIBS_QVL <<<"$(pkg-config --libs $(pkg-config --print-requires-private qvl)) \
        $(sed -n 's/^Libs.private://p' "$P/$LIBDIR/pkgconfig/qvl.pc")"
fi
expect 0 "(b) cc with libqvl.a and its private dependencies" "$CC" "${SANFLAGS[@]}" -std=c11 -Wall -Werror \
    "${CFLAGS_QVL[@]}" "$SRC/tests/consumer/consumer.c" -o "$T/consumer_static" -L"$P/$LIBDIR" \
    -Wl,-Bstatic -lqvl -Wl,-Bdynamic "${SLIBS_QVL[@]}" -lm
if [[ -x $T/consumer_static ]]; then
    readelf -d "$T/consumer_static" >"$T/dyn_b" 2>&1
    if grep -q 'libqvl' "$T/dyn_b"; then bad "(b) static consumer still needs libqvl.so"; else ok; fi
    run_consumer "(b) static" "$T/consumer_static"
fi

# (c) find_package(qvl CONFIG) from the prefix, once per imported target.
for kind in shared static; do
    static=OFF
    [[ $kind == static ]] && static=ON
    expect 0 "(c) configure the CMake consumer ($kind)" cmake -S "$SRC/tests/consumer" -B "$T/cmake_$kind" \
        -DCMAKE_PREFIX_PATH="$P" -DQVL_CONSUMER_STATIC=$static -DCMAKE_C_FLAGS="${SANFLAGS[*]}" \
        -DCMAKE_BUILD_TYPE=Release
    expect 0 "(c) build the CMake consumer ($kind)" cmake --build "$T/cmake_$kind"
    [[ -x $T/cmake_$kind/consumer ]] && run_consumer "(c) find_package, qvl::qvl${static/ON/_static}" \
        "$T/cmake_$kind/consumer"
done
readelf -d "$T/cmake_static/consumer" >"$T/dyn_c" 2>&1
if grep -q 'libqvl' "$T/dyn_c"; then bad "(c) qvl::qvl_static consumer needs libqvl.so"; else ok; fi

# (d) the source tree as a subproject: only its library (no tests, no CLI), qvl::qvl linked by the parent.
if [[ ${QVL_SANITIZE:-0} == 1 ]]; then
    echo "install.sh: (d) subproject build skipped under QVL_SANITIZE (it would build libqvl once more)"
else
    PARENT=$T/parent
    mkdir -p "$PARENT"
    cp "$SRC/tests/consumer/consumer.c" "$PARENT/"
    cat >"$PARENT/CMakeLists.txt" <<CMAKE
cmake_minimum_required(VERSION 3.20)
project(qvl_parent LANGUAGES C)
set(QVL_BUILD_TESTS OFF CACHE BOOL "" FORCE)
set(QVL_BUILD_CLI OFF CACHE BOOL "" FORCE)
add_subdirectory("$SRC" qvl)
add_executable(parent consumer.c)
target_link_libraries(parent PRIVATE qvl::qvl m)
get_target_property(opts parent COMPILE_OPTIONS)
get_directory_property(dir_opts COMPILE_OPTIONS)
file(WRITE \${CMAKE_BINARY_DIR}/parent_options.txt "target=\${opts}\ndirectory=\${dir_opts}\n")
CMAKE
    expect 0 "(d) configure the parent project" cmake -S "$PARENT" -B "$PARENT/build" -DCMAKE_BUILD_TYPE=Release
    expect 0 "(d) build the parent project" cmake --build "$PARENT/build" -j"$JOBS"
    if [[ -f $PARENT/build/parent_options.txt ]]; then
        has "(d) parent's target has no compile options" "$PARENT/build/parent_options.txt" '^target=opts-NOTFOUND$'
        has "(d) parent's directory has no compile options" "$PARENT/build/parent_options.txt" '^directory=$'
    else
        bad "(d) no parent_options.txt"
    fi
    # What the compiler is actually given for the parent's file: none of qvl's warning or FP flags.
    flags=$(cat "$PARENT"/build/CMakeFiles/parent.dir/flags.make 2>/dev/null)
    if [[ -n $flags ]] && ! grep -Eq -- '-ffp-contract|-Wshadow|-fvisibility|-Wvla|QVL_BUILDING|_GNU_SOURCE' \
        <<<"$flags"; then ok; else
        bad "(d) parent's compile flags carry qvl's options:"
        grep -E '^C_(FLAGS|DEFINES)' <<<"$flags" | sed 's/^/    /' >&2
    fi
    if [[ -n $flags ]] && grep -q -- "-I$SRC/include\|isystem $SRC/include" <<<"$flags"; then ok; else
        bad "(d) parent's compile flags lack qvl's include directory"
    fi
    [[ -x $PARENT/build/parent ]] &&
        LD_LIBRARY_PATH=$PARENT/build/qvl${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} run_consumer "(d) subproject" \
            "$PARENT/build/parent"
fi

echo "install.sh: $pass passed, $fail failed"
((fail == 0))
