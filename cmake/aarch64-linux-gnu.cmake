# Cross-compiling for Linux arm64 on Debian: gcc-aarch64-linux-gnu, the arm64 -dev packages through multiarch
# (dpkg --add-architecture arm64), tests run under qemu-user (scripts/cross_arm64.sh sets all of this up).
#   cmake -S . -B build-arm64 -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(QVL_CROSS_TRIPLE aarch64-linux-gnu)
set(CMAKE_C_COMPILER ${QVL_CROSS_TRIPLE}-gcc)
set(CMAKE_CXX_COMPILER ${QVL_CROSS_TRIPLE}-g++)
# ld -r and objcopy --localize-hidden for libqvl.a must be the target's binutils.
set(CMAKE_LINKER ${QVL_CROSS_TRIPLE}-ld)
set(CMAKE_OBJCOPY ${QVL_CROSS_TRIPLE}-objcopy)
set(CMAKE_AR ${QVL_CROSS_TRIPLE}-ar)
set(CMAKE_RANLIB ${QVL_CROSS_TRIPLE}-ranlib)
set(CMAKE_STRIP ${QVL_CROSS_TRIPLE}-strip)
# Multiarch: target libraries and headers live beside the host's under /usr (lib/aarch64-linux-gnu,
# include/aarch64-linux-gnu), so the root is / and only the target's pkg-config directories are searched.
set(CMAKE_LIBRARY_ARCHITECTURE ${QVL_CROSS_TRIPLE})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/${QVL_CROSS_TRIPLE}/pkgconfig:/usr/share/pkgconfig)
set(ENV{PKG_CONFIG_PATH} "")
# Test executables run through the user-mode emulator (no binfmt registration needed). With the multiarch arm64
# libc installed (libc6:arm64, which the -dev packages pull in) the programs run on its loader and libraries, as
# their dependencies do; `-L /usr/aarch64-linux-gnu` would pair the cross toolchain's ld.so with the multiarch
# libraries, and that mix runs thousands of times slower (test_ops: 0.1 s against 10+ minutes).
find_program(QVL_QEMU_AARCH64 NAMES qemu-aarch64-static qemu-aarch64)
if(QVL_QEMU_AARCH64)
  if(EXISTS /lib/ld-linux-aarch64.so.1)
    set(CMAKE_CROSSCOMPILING_EMULATOR ${QVL_QEMU_AARCH64})
  else()
    set(CMAKE_CROSSCOMPILING_EMULATOR ${QVL_QEMU_AARCH64} -L /usr/${QVL_CROSS_TRIPLE})
  endif()
endif()
