# Thin wrapper over CMake (the one source of truth): `make demo` runs the main job, `make test` runs the tests.
BUILD ?= build
ASAN_BUILD ?= build-asan
JOBS ?= $(shell nproc)

.PHONY: all deps build demo test test-release test-asan clean

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

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)
