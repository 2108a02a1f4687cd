# evmbpf: BPF programs (clang) + collector and readers (gcc).
# make            build build/evmbpf
# make test       install dependencies, build, run the test suite (root)
# make test-matrix  the full version matrix, slow cells too (root)
# make demo       trace the embedded demo workload and summarize it (root)
# make bench      overhead benchmark, side by side
# make install    install under $(PREFIX)

PREFIX   ?= /usr/local
BUILD    := build
CC       ?= gcc
CLANG    ?= clang
BPFTOOL  ?= bpftool
ARCH     := x86
PYTHON   ?= /usr/bin/python3

CFLAGS   ?= -O2 -g
CFLAGS   += -Wall -Wextra -Wno-unused-parameter -std=gnu11 -D_GNU_SOURCE \
            -Iinclude -I$(BUILD) -MMD -MP
LDLIBS   := -lbpf -lelf -lz -lcjson -lm
BPFFLAGS := -g -O2 -target bpf -D__TARGET_ARCH_$(ARCH) -Iinclude -Ivmlinux/$(ARCH) \
            -I$(BUILD) -Wall -Wno-unused-function -MMD -MP

ifeq ($(V),1)
Q :=
msg :=
else
Q := @
msg = @printf '  %-8s %s\n' "$(1)" "$(2)";
endif

BPF_SRCS  := $(wildcard bpf/*.bpf.c)
BPF_OBJS  := $(patsubst bpf/%.bpf.c,$(BUILD)/%.bpf.o,$(BPF_SRCS))
SKELS     := $(patsubst bpf/%.bpf.c,$(BUILD)/%.skel.h,$(BPF_SRCS))
USER_SRCS := $(wildcard user/*.c)
USER_OBJS := $(patsubst user/%.c,$(BUILD)/%.o,$(USER_SRCS))

.DELETE_ON_ERROR:
.PHONY: all clean test test-matrix demo bench install deps fuzz

all: $(BUILD)/evmbpf

$(BUILD):
	$(Q)mkdir -p $@

$(BUILD)/%.bpf.o: bpf/%.bpf.c | $(BUILD)
	$(call msg,BPF,$@)
	$(Q)$(CLANG) $(BPFFLAGS) -c $< -o $@

$(BUILD)/%.skel.h: $(BUILD)/%.bpf.o
	$(call msg,GEN-SKEL,$@)
	$(Q)$(BPFTOOL) gen skeleton $< name $(subst -,_,$*)_bpf > $@

# Every user object may include a skeleton: build them first.
$(USER_OBJS): $(BUILD)/%.o: user/%.c $(SKELS) | $(BUILD)
	$(call msg,CC,$@)
	$(Q)$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/evmbpf: $(USER_OBJS)
	$(call msg,LINK,$@)
	$(Q)$(CC) $(CFLAGS) $^ $(LDLIBS) -o $@

deps:
	scripts/install-deps.sh

test: deps
	$(MAKE) all
	$(MAKE) -C tests fuzz-build 2>/dev/null || true
	$(PYTHON) -m pytest -q tests $(PYTEST_ARGS)

# the whole version matrix (tests/test_matrix.py), slow cells included
test-matrix: deps
	$(MAKE) all
	EVMBPF_FULL_MATRIX=1 $(PYTHON) -m pytest -q tests/test_matrix.py $(PYTEST_ARGS)

demo: deps
	$(MAKE) all
	scripts/demo.sh

bench: deps
	$(MAKE) all
	$(PYTHON) scripts/bench.py $(BENCH_ARGS)

install: $(BUILD)/evmbpf
	install -D -m 0755 $(BUILD)/evmbpf $(DESTDIR)$(PREFIX)/bin/evmbpf

clean:
	rm -rf $(BUILD)

-include $(wildcard $(BUILD)/*.d)
