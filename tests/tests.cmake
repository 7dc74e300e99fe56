# Tests (included by the top-level CMakeLists.txt when QVL_BUILD_TESTS is ON): tests/unit/test_*.c each become one
# executable and one test, run from the build directory with the source tree in QVL_SOURCE_DIR and the CLI in
# QVL_BIN; tests/*.sh run the same way; every fuzz target gets a replay driver over its committed corpus.
enable_testing()
set(QVL_ROOT ${CMAKE_CURRENT_SOURCE_DIR})
qvl_internal(qvl_internal qvl_obj)

# One unit test `name`: `src` and testutil.c against library `lib`, with environment `env` (a list); extra compile
# and link options (a sanitizer) in the remaining arguments.
function(qvl_unit_test name src lib env)
  add_executable(${name} ${src} ${QVL_ROOT}/tests/unit/testutil.c)
  qvl_target_options(${name})
  target_include_directories(${name} PRIVATE ${QVL_ROOT}/tests/unit)
  target_link_libraries(${name} PRIVATE ${lib})
  target_compile_options(${name} PRIVATE ${ARGN})
  target_link_options(${name} PRIVATE ${ARGN})
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES ENVIRONMENT "${env}" TIMEOUT 1800 SKIP_RETURN_CODE 77)
endfunction()
set(QVL_TEST_ENV "QVL_SOURCE_DIR=${QVL_ROOT}")
# The CLI as the tests run it: the binary, or in a cross build a script running it through the emulator
# (CMAKE_CROSSCOMPILING_EMULATOR, which ctest applies to the unit tests itself), so no binfmt setup is needed.
set(QVL_TEST_CROSS 0)
if(CMAKE_CROSSCOMPILING)
  set(QVL_TEST_CROSS 1)
endif()
if(QVL_BUILD_CLI)
  set(QVL_TEST_BIN $<TARGET_FILE:qvl_cli>)
  if(CMAKE_CROSSCOMPILING AND CMAKE_CROSSCOMPILING_EMULATOR)
    string(JOIN " " QVL_EMU_LINE ${CMAKE_CROSSCOMPILING_EMULATOR})
    set(QVL_TEST_BIN ${CMAKE_CURRENT_BINARY_DIR}/qvl-emulated)
    file(GENERATE OUTPUT ${QVL_TEST_BIN} CONTENT "#!/bin/sh\nexec ${QVL_EMU_LINE} \"$<TARGET_FILE:qvl_cli>\" \"$@\"\n"
         FILE_PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)
  endif()
  list(APPEND QVL_TEST_ENV "QVL_BIN=${QVL_TEST_BIN}")
endif()
file(GLOB QVL_UNIT_TESTS CONFIGURE_DEPENDS ${QVL_ROOT}/tests/unit/test_*.c)
foreach(src ${QVL_UNIT_TESTS})
  get_filename_component(name ${src} NAME_WE)
  qvl_unit_test(${name} ${src} qvl_internal "${QVL_TEST_ENV}")
endforeach()
# Under a CPU emulator (a cross build's tests run in qemu) the AMX parity test leaves out its slowest fixture and
# test_peak_rss does not hold the fingerprint to its RSS bound.
if(CMAKE_CROSSCOMPILING)
  target_compile_definitions(test_parity_amx PRIVATE QVL_TEST_UNDER_EMULATOR=1)
  target_compile_definitions(test_peak_rss PRIVATE QVL_TEST_UNDER_EMULATOR=1) # qemu-user ignores MADV_DONTNEED
endif()
# ThreadSanitizer (it cannot share a process with ASan, so only in the plain build): the library built again with
# -fsanitize=thread, under the thread pool's own test and the test that drives several contexts from several
# threads at once (and 1, 2, 3 threads, and both kernel sets), the cache shared by threads, a video read on
# several decoders at once, and a video decoded on one thread while another encodes it (qvl_encode_stream).
if(NOT QVL_SANITIZE AND NOT QVL_FUZZ AND NOT CMAKE_CROSSCOMPILING)
  qvl_objects(qvl_obj_tsan -fsanitize=thread -g)
  qvl_internal(qvl_internal_tsan qvl_obj_tsan)
  foreach(name test_pool test_layouts test_plan test_cache test_video_skip test_video_stream)
    qvl_unit_test(${name}_tsan ${QVL_ROOT}/tests/unit/${name}.c qvl_internal_tsan
                  "QVL_SOURCE_DIR=${QVL_ROOT};TSAN_OPTIONS=halt_on_error=1 suppressions=${QVL_ROOT}/tests/tsan.supp"
                  -fsanitize=thread -g)
  endforeach()
endif()
if(QVL_BUILD_CLI)
  # A shim the shell tests preload into the CLI (tests/shim/swap_open.c: a file that shows other contents after its
  # first open); not in a cross build, whose CLI runs under the emulator.
  set(QVL_SWAP_SHIM "")
  if(NOT CMAKE_CROSSCOMPILING)
    add_library(qvl_test_swap_open MODULE ${QVL_ROOT}/tests/shim/swap_open.c)
    target_link_libraries(qvl_test_swap_open PRIVATE ${CMAKE_DL_LIBS})
    set(QVL_SWAP_SHIM "$<TARGET_FILE:qvl_test_swap_open>")
  endif()
  file(GLOB QVL_SHELL_TESTS CONFIGURE_DEPENDS ${QVL_ROOT}/tests/*.sh)
  foreach(sh ${QVL_SHELL_TESTS})
    get_filename_component(name ${sh} NAME_WE)
    add_test(NAME ${name} COMMAND bash ${sh})
    set_tests_properties(${name} PROPERTIES
      ENVIRONMENT "QVL_SOURCE_DIR=${QVL_ROOT};QVL_BIN=${QVL_TEST_BIN};QVL_BUILD_DIR=${CMAKE_CURRENT_BINARY_DIR};QVL_SANITIZE=$<BOOL:${QVL_SANITIZE}>;QVL_MEDIA=$<BOOL:${QVL_MEDIA}>;QVL_VIDEO=$<BOOL:${QVL_VIDEO}>;QVL_CROSS=${QVL_TEST_CROSS};QVL_SWAP_SHIM=${QVL_SWAP_SHIM};NM=${CMAKE_NM}"
      TIMEOUT 1800 SKIP_RETURN_CODE 77)
  endforeach()
endif()

# The server's tests (when it is built): tests/serve/test_*.c, against the internal library and the server's files
# compiled again over it (qvl_serve_internal), so they may call the server's private functions.
if(QVL_HAVE_SERVER)
  add_library(qvl_serve_internal STATIC ${QVL_SERVE_SOURCES})
  qvl_target_options(qvl_serve_internal)
  target_compile_options(qvl_serve_internal PRIVATE -Wno-format-truncation)
  target_include_directories(qvl_serve_internal PUBLIC ${QVL_ROOT}/tools/serve ${QVL_ROOT}/tools)
  target_link_libraries(qvl_serve_internal PUBLIC qvl_internal PkgConfig::QVL_MHD)
  target_compile_definitions(qvl_serve_internal PUBLIC QVL_WITH_SERVER=1)
  # The qvl binary again with the server's test hooks (QVL_SERVE_TEST_HOOKS: srv_test_hold in serve.h), which
  # test_serve_races.c runs: under ThreadSanitizer in a build without another sanitizer, so that the server's threads
  # are checked where they meet, else with the build's own (ASan) options.
  set(QVL_HOOKS_LIB qvl_internal)
  set(QVL_HOOKS_FLAGS "")
  if(NOT QVL_SANITIZE AND NOT QVL_FUZZ AND NOT CMAKE_CROSSCOMPILING)
    set(QVL_HOOKS_LIB qvl_internal_tsan)
    set(QVL_HOOKS_FLAGS -fsanitize=thread -g)
  endif()
  add_executable(qvl_serve_hooks ${QVL_TOOL_SOURCES} ${QVL_SERVE_SOURCES})
  qvl_target_options(qvl_serve_hooks)
  target_compile_options(qvl_serve_hooks PRIVATE -Wno-format-truncation ${QVL_HOOKS_FLAGS})
  target_link_options(qvl_serve_hooks PRIVATE ${QVL_HOOKS_FLAGS})
  target_include_directories(qvl_serve_hooks PRIVATE ${QVL_ROOT}/tools/serve ${QVL_ROOT}/tools)
  target_compile_definitions(qvl_serve_hooks PRIVATE QVL_WITH_SERVER=1 QVL_WITH_VIDEO=$<BOOL:${QVL_VIDEO}>
                             QVL_SERVE_TEST_HOOKS=1)
  target_link_libraries(qvl_serve_hooks PRIVATE ${QVL_HOOKS_LIB} PkgConfig::QVL_MHD PkgConfig::QVL_CJSON
                        PkgConfig::QVL_NETTLE Threads::Threads m)
  file(GLOB QVL_SERVE_TESTS CONFIGURE_DEPENDS ${QVL_ROOT}/tests/serve/test_*.c)
  foreach(src ${QVL_SERVE_TESTS})
    get_filename_component(name ${src} NAME_WE)
    qvl_unit_test(${name} ${src} qvl_serve_internal
                  "${QVL_TEST_ENV};QVL_SERVE_HOOKS_BIN=$<TARGET_FILE:qvl_serve_hooks>;TSAN_OPTIONS=halt_on_error=1 suppressions=${QVL_ROOT}/tests/tsan.supp")
    target_sources(${name} PRIVATE ${QVL_ROOT}/tests/serve/serve_client.c) # the client and server helpers they share
  endforeach()
endif()

# Fuzz targets: libFuzzer builds with clang (QVL_FUZZ=ON); every build gets a replay driver that runs each
# target over its committed corpus as an ordinary test.
file(GLOB QVL_FUZZ_TARGETS CONFIGURE_DEPENDS ${QVL_ROOT}/fuzz/fuzz_*.c)
if(NOT QVL_HAVE_SERVER) # the server's request parser is fuzzed only where the server is built
  list(REMOVE_ITEM QVL_FUZZ_TARGETS ${QVL_ROOT}/fuzz/fuzz_serve_request.c)
endif()
foreach(src ${QVL_FUZZ_TARGETS})
  get_filename_component(name ${src} NAME_WE)
  string(REPLACE "fuzz_" "" corpus ${name})
  set(lib qvl_internal)
  if(name STREQUAL "fuzz_serve_request")
    set(lib qvl_serve_internal)
  endif()
  add_executable(${name}_replay ${src} ${QVL_ROOT}/fuzz/replay.c)
  qvl_target_options(${name}_replay)
  target_link_libraries(${name}_replay PRIVATE ${lib})
  add_test(NAME ${name}_replay COMMAND ${name}_replay ${QVL_ROOT}/fuzz/corpus/${corpus})
  # Bounded: each corpus replays in seconds (under ASan too); a hang is a failure, not a stuck CI job.
  set_tests_properties(${name}_replay PROPERTIES TIMEOUT 300)
  if(QVL_FUZZ)
    add_executable(${name} ${src})
    qvl_target_options(${name})
    target_compile_options(${name} PRIVATE -fsanitize=fuzzer) # ASan/UBSan: the QVL_FUZZ options
    target_link_options(${name} PRIVATE -fsanitize=fuzzer)
    target_link_libraries(${name} PRIVATE ${lib})
  endif()
endforeach()

# Fault injection (tests/fault/fault.c): the Nth allocation, read or write fails along each path, for every N.
# The program defines the allocator itself and wraps the library's I/O calls at link time. Every build runs a
# bounded slice (`--max-runs 40`: at most about 40 values of N per path and class); QVL_FAULT=ON (`make
# test-fault`, with ASan/LSan) adds the sweep over every N.
set(QVL_FAULT_WRAP fread fwrite read write pread pwrite mmap fflush fclose fsync ftruncate rename)
list(TRANSFORM QVL_FAULT_WRAP PREPEND "-Wl,--wrap=")
add_executable(qvl_fault ${QVL_ROOT}/tests/fault/fault.c)
qvl_target_options(qvl_fault)
target_link_libraries(qvl_fault PRIVATE qvl_internal)
target_link_options(qvl_fault PRIVATE ${QVL_FAULT_WRAP})
# fault_NAME: qvl_fault with the arguments that follow.
function(qvl_fault_test name)
  add_test(NAME fault_${name} COMMAND qvl_fault ${ARGN})
  set_tests_properties(fault_${name} PROPERTIES ENVIRONMENT "QVL_SOURCE_DIR=${QVL_ROOT}" TIMEOUT 1800
                       SKIP_RETURN_CODE 77)
endfunction()
qvl_fault_test(slice --max-runs 40)
# every read of the load ending early, as in a checkpoint truncated after it was opened (with a mapping: SIGBUS)
qvl_fault_test(load_eof --path load_layouts --class read --eof)
if(QVL_FAULT)
  qvl_fault_test(full)
endif()
# Regressions, one per fix: every N among the calls made under the function named (--at: ASan builds only).
if(QVL_SANITIZE AND NOT QVL_FUZZ)
  qvl_fault_test(sniff --path pipeline --class read --at sniff_image)
  if(QVL_VIDEO)
    # a failed open of a video item's path once sent it to the image decoder ("a video, not an image")
    qvl_fault_test(sniff_nomem --path video --class alloc --at sniff_image)
  endif()
  qvl_fault_test(read_rows_read --path read_rows --class read --at read_rows)
  qvl_fault_test(open_nomem --path read_rows --class alloc --at fu_open_regular)
  qvl_fault_test(tmp_nomem --path write_npy --class alloc --at fu_tmp_open)
  qvl_fault_test(st_writer_nomem --path st_writer --class alloc --at qvl_st_writer_open)
  qvl_fault_test(relocate_nomem --path st_writer --class alloc --at relocate)
  qvl_fault_test(json_config --path pipeline --class alloc --at config_parse)
  qvl_fault_test(json_preproc --path preprocess --class alloc --at qvl_preprocess_params_load)
  qvl_fault_test(json_safetensors --path read_rows --class alloc --at st_parse_header)
  qvl_fault_test(jpeg_nomem --path decode --class alloc --at dec_jpeg)
  qvl_fault_test(png_nomem --path decode --class alloc --at dec_png)
  qvl_fault_test(gif_nomem --path decode --class alloc --at dec_gif)
  qvl_fault_test(webp_nomem --path decode --class alloc --at WebPAnimDecoderNew)
endif()
