# Thin wrapper over CMake (the one source of truth): `make demo` runs the main job, `make test` runs the tests.
# CI also runs `make test-config` (core-only QVL_MEDIA=OFF and QVL_VIDEO=OFF builds, and the core library compiled
# for 32-bit x86) and `make test-arm64` (a cross build for Linux arm64, tested under qemu-user). `make test-python`
# builds the Python wheel in a clean venv, installs it and runs python/tests (the binding and the Ray job) against it.
BUILD ?= build
ASAN_BUILD ?= build-asan
CORE_BUILD ?= build-core
NOVIDEO_BUILD ?= build-novideo
I386_BUILD ?= build-i386
FAULT_BUILD ?= build-fault
FUZZ_SECONDS ?= 10
ARM64_BUILD ?= build-arm64
JOBS ?= $(shell nproc)

.PHONY: all deps build demo test test-release test-asan test-config test-core test-novideo test-i386 test-arm64 \
        test-fault test-python fuzz-report clean

all: build

deps:
	@scripts/deps.sh

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DQVL_WERROR=ON >/dev/null
	@cmake --build $(BUILD) -j$(JOBS)

demo: build
	@BUILD=$(BUILD) scripts/demo.sh

test-release: build
	cd $(BUILD) && ctest --output-on-failure

test-asan: deps
	@cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DQVL_WERROR=ON -DQVL_SANITIZE=ON >/dev/null
	@cmake --build $(ASAN_BUILD) -j$(JOBS)
	cd $(ASAN_BUILD) && ctest --output-on-failure

test: test-release test-asan

# One configuration: $(1) build dir, $(2) CMake options.
define config_test
	@cmake -S . -B $(1) -DCMAKE_BUILD_TYPE=Release -DQVL_WERROR=ON $(2) >/dev/null
	@cmake --build $(1) -j$(JOBS)
	cd $(1) && ctest --output-on-failure -j$(JOBS)
endef

test-core: deps
	$(call config_test,$(CORE_BUILD),-DQVL_MEDIA=OFF)

test-novideo: deps
	$(call config_test,$(NOVIDEO_BUILD),-DQVL_VIDEO=OFF)

# The core library compiled for 32-bit x86 (-m32, -Werror; compile only).
test-i386: deps
	@BUILD=$(I386_BUILD) JOBS=$(JOBS) scripts/check_i386.sh

test-config: test-core test-novideo test-i386

# Fault injection over every N (tests/fault/fault.c) under ASan/LSan, with the bounded slice and the regressions.
test-fault: deps
	@cmake -S . -B $(FAULT_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DQVL_WERROR=ON -DQVL_SANITIZE=ON -DQVL_FAULT=ON >/dev/null
	@cmake --build $(FAULT_BUILD) -j$(JOBS) --target qvl_fault
	cd $(FAULT_BUILD) && ctest --output-on-failure -R '^fault_'

# libFuzzer runs of every fuzz/fuzz_*.c target, FUZZ_SECONDS each, with executions and coverage (needs clang).
fuzz-report:
	@JOBS=$(JOBS) fuzz/report.sh $(FUZZ_SECONDS)

test-arm64:
	@BUILD=$(ARM64_BUILD) JOBS=$(JOBS) scripts/cross_arm64.sh

test-python: build
	@BUILD=$(BUILD) scripts/test_python.sh

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(CORE_BUILD) $(NOVIDEO_BUILD) $(I386_BUILD) $(ARM64_BUILD) $(FAULT_BUILD) build-fuzz-report
