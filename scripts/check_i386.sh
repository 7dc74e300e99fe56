#!/usr/bin/env bash
# Compile the core library (every kernel set, no media libraries) for 32-bit x86 with warnings as errors: the
# AMX kernels' tile instructions exist only in 64-bit mode, and size limits written for a 64-bit size_t must
# still be well-defined C with a 32-bit one. Compiles only (Debian's i386 -dev packages of the media libraries
# are not needed); installs gcc-multilib when `gcc -m32` cannot build a program that includes the C library and
# kernel headers the core library uses (with only libc6-dev-i386 there, a bare program links but <errno.h> misses
# the <asm/...> headers that gcc-multilib provides). Safe to run repeatedly.
# Environment: BUILD (default build-i386), JOBS (default nproc).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-i386}
JOBS=${JOBS:-$(nproc)}
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
cat > "$probe/t.c" <<'EOF'
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>
int main(void) { return errno + (int)sqrt((double)syscall(SYS_getpid) * 0.0); }
EOF
if ! gcc -m32 "$probe/t.c" -o "$probe/t" -lm -pthread 2>/dev/null; then
  . scripts/apt_install.sh
  apt_install check_i386 gcc-multilib
fi
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DQVL_WERROR=ON -DQVL_MEDIA=OFF -DQVL_VIDEO=OFF \
      -DCMAKE_C_FLAGS=-m32 >/dev/null
cmake --build "$BUILD" -j"$JOBS" --target qvl_obj
echo "check_i386: the core library compiles for 32-bit x86 (-m32, -Werror)"
