# evmbpf: BPF programs (clang) + collector and readers (gcc).
# make            build build/evmbpf (and the agent, and the tests' aids)
# make test-aids  build/evmbpf-test-aids, the tests' aids (tests/aids/)
# make test       install dependencies, build, run the test suite (root)
# make test-matrix  the full version matrix, slow cells too (root)
# make demo       trace the embedded demo workload and summarize it (root)
# make bench      overhead benchmark, side by side
# make readcost   build/readcost: the cost of one read of user memory (run by hand)
# make install    install the binary, the man page and the recorder's systemd unit
#                 (contrib/evmbpf-record.service) under $(PREFIX)
# make static     build/evmbpf-static: one file, no shared library (libc included), and
#                 build/evmbpf-gpu/: it with the CUPTI agent, the folder a GPU machine needs

PREFIX   ?= /usr/local
MANDIR   ?= $(PREFIX)/share/man
BUILD    := build
CC       ?= gcc
CLANG    ?= clang
BPFTOOL  ?= bpftool
ARCH     := x86
PYTHON   ?= /usr/bin/python3

CFLAGS   ?= -O2 -g
# the project's own C builds without a warning (WERROR= lifts it, for a newer compiler's
# new warnings until they are fixed)
WERROR   ?= -Werror
CFLAGS   += -Wall -Wextra -Wno-unused-parameter -std=gnu11 -D_GNU_SOURCE \
            -Iinclude -I$(BUILD) -MMD -MP $(WERROR)
LDLIBS   := -lbpf -lelf -lz -lcjson -lpcre2-8 -lm
BPFFLAGS := -g -O2 -target bpf -D__TARGET_ARCH_$(ARCH) -Iinclude -Ivmlinux/$(ARCH) \
            -I$(BUILD) -Wall -Wno-unused-function -MMD -MP $(WERROR)
# COUNT_READS=1: a profiling build that counts the programs' reads per record
# (bpf/readcount.bpf.h, scripts/readcount.py); give it its own BUILD=build-count
BPFFLAGS += $(if $(COUNT_READS),-DEVMBPF_COUNT_READS)
# ABLATE=N: a profiling build that leaves one stage of a module call out (bpf/ablate.bpf.h,
# scripts/cost-breakdown.py); its traces are incomplete. Give it its own BUILD=build-ablate-N
BPFFLAGS += $(if $(ABLATE),-DEVMBPF_ABLATE=$(ABLATE))
CFLAGS   += $(if $(ABLATE),-DEVMBPF_ABLATE=$(ABLATE))

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

# user/: main.c, and one folder a part. Each part sees its own headers and common/'s
# only, so the readers cannot come to depend on the collector (or the other way).
COMMON_SRCS    := $(wildcard user/common/*.c)
READER_SRCS    := $(wildcard user/readers/*.c)
COLLECTOR_SRCS := $(wildcard user/collector/*.c user/collector/*/*.c)
# the collector's folders, one concern each (docs/design.md, "The map"): its parts see
# each other's headers by name
COLLECTOR_INCS := -Iuser/collector $(patsubst %/,-I%,$(sort $(dir $(wildcard user/collector/*/*.c))))
USER_SRCS := user/main.c $(COMMON_SRCS) $(READER_SRCS) $(COLLECTOR_SRCS)
USER_OBJS := $(patsubst user/%.c,$(BUILD)/user/%.o,$(USER_SRCS))
DEPFILES  := $(USER_OBJS:.o=.d) $(BPF_OBJS:.o=.d)

$(BUILD)/user/common/%.o:    INCS := -Iuser/common
$(BUILD)/user/readers/%.o:   INCS := -Iuser/common -Iuser/readers
$(BUILD)/user/collector/%.o: INCS := -Iuser/common $(COLLECTOR_INCS)
$(BUILD)/user/main.o:        INCS := -Iuser/common $(COLLECTOR_INCS) -Iuser/readers
# the agent's dtype codes and its kernels' float rule (agent/stats_kernels.h)
$(BUILD)/user/collector/gpu/cupti_stats.o: INCS := -Iuser/common $(COLLECTOR_INCS) -Iagent

.DELETE_ON_ERROR:
.SECONDARY: $(BPF_OBJS)
.PHONY: all clean test test-matrix test-stress demo bench install deps fuzz check-deps static

all: $(BUILD)/evmbpf agent test-aids

# The CUPTI agent (agent/, --cupti): a shared library CUDA loads into the command,
# compiled against CUPTI's and CUDA's headers only (libcupti is opened at run time).
# CUPTI_INC: a CUDA toolkit's headers when there is one (the same CUPTI generation as
# the wheels' libcupti), else Debian's, unpacked by scripts/cupti-headers.sh. Without
# cupti.h and cuda.h the agent is not built (one message) and --cupti says so.
CUPTI_INC ?= $(firstword $(patsubst %/cupti.h,%,$(wildcard /usr/local/cuda/include/cupti.h \
	/usr/local/cuda-*/include/cupti.h /var/cache/evmbpf/cupti/include/cupti.h)))
AGENT := $(BUILD)/evmbpf-cupti.so
AGENT_SRCS := agent/agent.c agent/numeric.c
# One agent for libcupti 12 and 13: every field it reads of CUPTI's records and
# callbacks is at the place agent/cupti_layout.h says, checked (_Static_assert) against
# each header set found: CUDA 12's (Debian's libcupti-dev, scripts/cupti-headers.sh),
# CUDA 13's (a toolkit, or the nvidia-cuda-cupti 13 and nvidia-cuda-runtime 13 wheels'
# include/: CUPTI_LAYOUT_INCS="DIR..."). A set missing is said, not an error.
CUPTI_LAYOUT_INCS ?= $(sort $(realpath $(patsubst %/cupti.h,%,$(wildcard \
	/usr/local/cuda/include/cupti.h /usr/local/cuda-*/include/cupti.h \
	/var/cache/evmbpf/cupti/include/cupti.h))))
CUPTI_LAYOUT_OK := $(BUILD)/agent/cupti-layout.ok
$(CUPTI_LAYOUT_OK): agent/cupti_layout.c agent/cupti_layout.h | $(BUILD)
	$(Q)mkdir -p $(dir $@) && : > $@.tmp && for inc in $(CUPTI_LAYOUT_INCS); do \
		[ -f $$inc/cupti.h ] && [ -f $$inc/cuda.h ] || continue; \
		api=$$(printf '#include <cupti.h>\nCUPTI_API_VERSION\n' | \
			$(CC) -E -P -I$$inc -x c - | tail -n 1); \
		major=$$([ $$api -ge 100000 ] && echo $$((api / 10000)) || echo 12); \
		printf '  %-8s CUDA %s (CUPTI API %s) %s\n' LAYOUT $$major $$api $$inc; \
		$(CC) -std=gnu11 -fsyntax-only -Iagent -I$$inc agent/cupti_layout.c || exit 1; \
		echo "$$major $$api $$inc" >> $@.tmp; \
	done; \
	for major in 12 13; do grep -q "^$$major " $@.tmp || \
		printf '  %-8s no CUDA %s CUPTI headers here: its layouts not checked\n' LAYOUT $$major; \
	done; mv $@.tmp $@
# --numeric's kernels (agent/stats_kernels.c; their bodies in stats_kernels.h) as PTX, by
# clang's NVPTX backend (no nvcc, no CUDA install: -nocudainc -nocudalib), embedded in the
# agent (.incbin); PTX for sm_70, which the driver compiles for the device it runs on at
# the first request.
AGENT_PTX := $(BUILD)/agent/stats_kernels.ptx
PTX_FLAGS := -x cuda --cuda-device-only -nocudainc -nocudalib --cuda-gpu-arch=sm_70 -O2 -S \
             -ffp-contract=off -Wall -Wno-unused-function -Wno-unknown-cuda-version
$(AGENT_PTX): agent/stats_kernels.c agent/stats_kernels.h | $(BUILD)
	$(call msg,PTX,$@)
	$(Q)mkdir -p $(dir $@) && $(CLANG) $(PTX_FLAGS) $< -o $@
.PHONY: agent
ifneq ($(and $(CUPTI_INC),$(wildcard $(CUPTI_INC)/cuda.h)),)
agent: $(AGENT)
$(AGENT): $(AGENT_SRCS) agent/agent.h agent/agent_numeric.h agent/cupti_layout.h agent/stats_kernels.h include/cupti_ring.h \
	  $(AGENT_PTX) $(CUPTI_LAYOUT_OK) | $(BUILD)
	$(call msg,AGENT,$@)
	$(Q)$(CC) $(CFLAGS) -fPIC -fvisibility=hidden -shared -I$(CUPTI_INC) -Iagent \
		-DEVM_PTX_FILE='"$(AGENT_PTX)"' $(AGENT_SRCS) -ldl -lpthread \
		-Wl,-soname,evmbpf-cupti.so -o $@
else
agent: $(AGENT_PTX)
	@echo "  SKIP     $(AGENT): no cupti.h and cuda.h (scripts/cupti-headers.sh ensure, or CUPTI_INC=DIR)"
endif

$(BUILD):
	$(Q)mkdir -p $@

$(BUILD)/%.bpf.o: bpf/%.bpf.c | $(BUILD)
	$(call msg,BPF,$@)
	$(Q)$(CLANG) $(BPFFLAGS) -c $< -o $@

$(BUILD)/%.skel.h: $(BUILD)/%.bpf.o
	$(call msg,GEN-SKEL,$@)
	$(Q)$(BPFTOOL) gen skeleton $< name $(subst -,_,$*)_bpf > $@

# The collector (and main.c, through tracer.h) includes the skeletons: build them first.
$(filter $(BUILD)/user/collector/%,$(USER_OBJS)) $(BUILD)/user/main.o: $(SKELS)

$(USER_OBJS): $(BUILD)/user/%.o: user/%.c
	$(call msg,CC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS) $(INCS) -c $< -o $@

$(BUILD)/evmbpf: $(USER_OBJS)
	$(call msg,LINK,$@)
	$(Q)$(CC) $(CFLAGS) $^ $(LDLIBS) -o $@

# build/evmbpf-test-aids: the subcommands the tests drive evmbpf's own code through
# without a traced process (tests/aids/aids.h; tests/test_cupti.py, tests/test_regex.py),
# linked with every object of evmbpf but main.o. Not part of evmbpf; not installed.
AIDS_SRCS := $(wildcard tests/aids/*.c)
AIDS_OBJS := $(patsubst tests/aids/%.c,$(BUILD)/tests/aids/%.o,$(AIDS_SRCS))
AIDS      := $(BUILD)/evmbpf-test-aids
.PHONY: test-aids
test-aids: $(AIDS)
$(AIDS_OBJS): INCS := -Iuser/common $(COLLECTOR_INCS) -Iagent
# the kernels' host build (agent/stats_kernels.h), without FMA contraction as the PTX
$(BUILD)/tests/aids/cupti_stats.o: CFLAGS += -ffp-contract=off
$(AIDS_OBJS): $(SKELS)
$(AIDS_OBJS): $(BUILD)/tests/aids/%.o: tests/aids/%.c
	$(call msg,CC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS) $(INCS) -Itests/aids -c $< -o $@
$(AIDS): $(AIDS_OBJS) $(filter-out $(BUILD)/user/main.o,$(USER_OBJS))
	$(call msg,LINK,$@)
	$(Q)$(CC) $(CFLAGS) $^ $(LDLIBS) -o $@
-include $(wildcard $(AIDS_OBJS:.o=.d))

# make static: the same objects linked with -static. Debian has static archives of
# libbpf, libelf, zlib and glibc, but ships cJSON as a shared library only: its
# cJSON.c is compiled from the Debian source package of the installed libcjson-dev
# (scripts/cjson-source.sh), whose cJSON.h is the one the readers were compiled with.
STATIC_DIR    := $(BUILD)/static
STATIC_LDLIBS := -lbpf -lelf -lz -lpcre2-8 -lm

# ... and build/evmbpf-gpu/: what a machine without a toolchain needs, in one folder to
# copy: evmbpf (the static binary), evmbpf-cupti.so beside it (where --cupti looks for
# its agent; when the agent could be built), and AGENT-NEEDS: what the agent needs of
# the target (the glibc symbol versions and the libraries it links).
STATIC_BUNDLE := $(BUILD)/evmbpf-gpu
static: $(BUILD)/evmbpf-static $(STATIC_BUNDLE)/evmbpf

$(STATIC_BUNDLE)/evmbpf: $(BUILD)/evmbpf-static agent
	$(call msg,BUNDLE,$(STATIC_BUNDLE))
	$(Q)rm -rf $(STATIC_BUNDLE) && mkdir -p $(STATIC_BUNDLE)
	$(Q)if [ -f $(AGENT) ]; then cp $(AGENT) $(STATIC_BUNDLE)/ && { \
		echo "evmbpf-cupti.so (--cupti's agent, loaded into the target) needs:"; \
		readelf -d $(AGENT) | sed -n 's/.*(NEEDED).*\[\(.*\)\]/  library \1/p'; \
		readelf -V $(AGENT) | grep -o 'GLIBC_[0-9.]*' | sort -u -t. -k1,1 -k2,2n -k3,3n | \
			tail -n 1 | sed 's/GLIBC_/  glibc >= /'; \
		echo "  libcupti of CUDA 12 or 13 in the target, found at run time (EVMBPF_CUPTI_LIB)"; \
		} > $(STATIC_BUNDLE)/AGENT-NEEDS; \
	else echo "no CUPTI agent was built (no CUPTI headers): --cupti is not available" \
		> $(STATIC_BUNDLE)/AGENT-NEEDS; fi
	$(Q)cp $(BUILD)/evmbpf-static $@

$(STATIC_DIR)/cjson/cJSON.c:
	$(call msg,FETCH,$@)
	$(Q)scripts/cjson-source.sh $(STATIC_DIR)/cjson

$(STATIC_DIR)/cJSON.o: $(STATIC_DIR)/cjson/cJSON.c
	$(call msg,CC,$@)
	$(Q)cmp -s $(STATIC_DIR)/cjson/cJSON.h /usr/include/cjson/cJSON.h || \
		{ echo "cJSON.h of the source differs from the installed one" >&2; exit 1; }
	$(Q)$(CC) -O2 -g -std=c89 -c $< -o $@

$(BUILD)/evmbpf-static: $(USER_OBJS) $(STATIC_DIR)/cJSON.o
	$(call msg,LINK,$@)
	$(Q)$(CC) $(CFLAGS) -static $^ $(STATIC_LDLIBS) -o $@

# The shape of the code: parts, floors, arrows, circles, and the size limits
# (scripts/check-structure.py; exit 1 while a circle or a limit remains)
.PHONY: check-structure
check-structure:
	$(PYTHON) scripts/check-structure.py

# Every header's change rebuilds each object that includes it, directly or not.
check-deps: $(BUILD)/evmbpf
	$(PYTHON) scripts/check-deps.py

deps:
	scripts/install-deps.sh

test: deps
	$(MAKE) all
	$(MAKE) check-structure
	$(MAKE) check-deps
	$(MAKE) -C tests fuzz-build
	$(PYTHON) -m pytest -q --durations=25 tests $(PYTEST_ARGS)

# the whole version matrix (tests/test_matrix.py), slow cells included
test-matrix: deps
	$(MAKE) all
	EVMBPF_FULL_MATRIX=1 $(PYTHON) -m pytest -q tests/test_matrix.py $(PYTEST_ARGS)

# The fidelity matrix, the holds and the bound calls with twice as many busy loops as
# CPUs beside them (tests/conftest.py's stress fixture): traces compared on a starved machine
test-stress: deps
	$(MAKE) all
	EVMBPF_STRESS=1 $(PYTHON) -m pytest -q tests/test_matrix.py tests/test_holds.py tests/test_bound.py $(PYTEST_ARGS)

demo: deps
	$(MAKE) all
	scripts/demo.sh

bench: deps
	$(MAKE) all
	$(PYTHON) scripts/bench.py $(BENCH_ARGS)

# make readcost: build/readcost, what one read of user memory costs a uprobe program on
# this kernel, by size, place and primitive (scripts/readcost/; run by hand, as root)
.PHONY: readcost
readcost: $(BUILD)/readcost
$(BUILD)/readcost.bpf.o: scripts/readcost/readcost.bpf.c | $(BUILD)
	$(call msg,BPF,$@)
	$(Q)$(CLANG) $(BPFFLAGS) -c $< -o $@
$(BUILD)/readcost: scripts/readcost/readcost.c $(BUILD)/readcost.skel.h
	$(call msg,LINK,$@)
	$(Q)$(CC) $(CFLAGS) $< -lbpf -lelf -lz -lpthread -o $@

install: $(BUILD)/evmbpf
	install -D -m 0755 $(BUILD)/evmbpf $(DESTDIR)$(PREFIX)/bin/evmbpf
	if [ -f $(AGENT) ]; then install -D -m 0644 $(AGENT) \
		$(DESTDIR)$(PREFIX)/lib/evmbpf/evmbpf-cupti.so; fi
	install -D -m 0644 docs/evmbpf.8 $(DESTDIR)$(MANDIR)/man8/evmbpf.8
	install -D -m 0644 contrib/evmbpf-record.service \
		$(DESTDIR)$(PREFIX)/lib/systemd/system/evmbpf-record.service
	sed -i 's|/usr/local/bin/evmbpf|$(PREFIX)/bin/evmbpf|' \
		$(DESTDIR)$(PREFIX)/lib/systemd/system/evmbpf-record.service

clean:
	rm -rf $(BUILD)

-include $(wildcard $(DEPFILES))
