# Deltafin - plain Makefile.
#   make            optimized library, CLI and tools in build/
#   make debug      the same with AddressSanitizer + UndefinedBehaviorSanitizer in build-debug/
#   make test       unit + reference tests, optimized and then under the sanitizers (ASan+UBSan, TSan)
#   make test-ref   regenerate llama.cpp and chat-template references live and compare
#   make test-sweep random configurations of every family against llama.cpp, longer (tests/sweep.sh)
#   make bench      side-by-side speed comparison with llama.cpp
#   make cross      build for aarch64 (NEON) with gcc-aarch64-linux-gnu
#   make tsan       tests/test_threads.c under ThreadSanitizer in build-tsan/ (part of make test)
#   make install    the program, libdeltafin.so and .a, the MPI plugin, the header, deltafin.pc, the man page and the docs
#                   under $(DESTDIR)$(PREFIX) (default /usr/local); make uninstall takes them away
CC      ?= cc
MODE    ?= release
BUILD   ?= build
VERSION := 0.1.0
SOMAJOR := 0
PREFIX  ?= /usr/local
BINDIR  ?= $(PREFIX)/bin
LIBDIR  ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
MANDIR  ?= $(PREFIX)/share/man
DOCDIR  ?= $(PREFIX)/share/doc/deltafin
ARCH    := $(shell $(CC) -dumpmachine | cut -d- -f1)

WARN    := -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter
CSTD    := -std=c11 -D_GNU_SOURCE
# src/ is split by layer (docs/design.md), a layer's own rooms in folders of it (src/types/amx); every folder is
# on the include path, so a file names another's header by its base name.
SRC_ALL := $(wildcard src/*/*.c src/*/*/*.c)
SRC_DIRS := $(sort $(patsubst %/,%,$(dir $(SRC_ALL) $(wildcard src/*/*.h src/*/*/*.h))))
HDRS    := $(wildcard src/*/*.h src/*/*/*.h include/*.h)
INC     := -Iinclude $(addprefix -I,$(SRC_DIRS))
ifeq ($(MODE),debug)
OPT     := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all
LDSAN   := -fsanitize=address,undefined
else ifeq ($(MODE),tsan)
OPT     := -O1 -g -fno-omit-frame-pointer -fsanitize=thread
LDSAN   := -fsanitize=thread
else
OPT     := -O2 -g
LDSAN   :=
endif
CFLAGS  += $(CSTD) $(WARN) $(OPT) $(INC) -pthread
LDLIBS  := -lpcre2-8 -lutf8proc -luring -lcjson -lm -pthread $(LDSAN)

# Per-ISA kernel files get their own target flags; the rest of the code stays portable
# and the right kernels are picked at run time (quant_init).
ISA_SRC := $(wildcard src/types/kern_*.c src/types/amx/kern_*.c)
ifeq ($(ARCH),x86_64)
ISA_KEEP := $(filter src/types/kern_avx2.c src/types/kern_avx512.c src/types/amx/kern_amx.c src/types/amx/kern_amx_model.c,\
                     $(ISA_SRC))
else ifeq ($(ARCH),aarch64)
ISA_KEEP := $(filter src/types/kern_neon.c,$(ISA_SRC))
else
ISA_KEEP :=
endif
LIB_SRC := $(filter-out $(ISA_SRC),$(SRC_ALL)) $(ISA_KEEP)
LIB_OBJ := $(patsubst src/%.c,$(BUILD)/obj/%.o,$(LIB_SRC))
# Two archives of the same objects (docs/design.md, "The library's symbols"):
# libdeltafin.a, the public one, is one relocatable object whose only global
# symbols are the functions include/deltafin.h declares (every internal name,
# gguf_*, ws_*, tok_*, internal df_* helpers, is made local by objcopy, so a
# program may link Deltafin beside ggml); libdeltafin-internal.a keeps every
# symbol, for the tests and tools that call internals (mkmodel, dequant,
# bench/kernels.c). The CLI links the public one only.
LIB     := $(BUILD)/libdeltafin.a
INTLIB  := $(BUILD)/libdeltafin-internal.a
PUBSYMS := $(BUILD)/deltafin.syms
# The shared library: the same objects (compiled position-independent, -fPIC), linked with a version script
# that exports the header's functions only (deltafin.map, made from the same list as the archive's).
SHLIB   := $(BUILD)/libdeltafin.so.$(VERSION)
OBJCOPY ?= objcopy

# Programs (one main each): those linked with the library, and small standalone ones.
LIB_TOOLS  := mkmodel dequant
SOLO_TOOLS := cachesim logitcmp
TOOL_COMMON := $(filter-out $(patsubst %,tools/%.c,$(LIB_TOOLS) $(SOLO_TOOLS)),$(wildcard tools/*.c))
TOOL_COMMON_OBJ := $(patsubst tools/%.c,$(BUILD)/obj/tools/%.o,$(TOOL_COMMON))
TOOLS   := $(BUILD)/deltafin $(patsubst %,$(BUILD)/%,$(LIB_TOOLS) $(SOLO_TOOLS))
# `deltafin serve` and `deltafin chat` (server/): linked into the deltafin program only,
# compiled (as the CLI) seeing the public header only.
SERVER_SRC := $(wildcard server/*.c)
SERVER_OBJ := $(patsubst server/%.c,$(BUILD)/obj/server/%.o,$(SERVER_SRC)) $(BUILD)/obj/server/web.o
SERVER_LIBS := -lmicrohttpd -lcjson -ledit
# jobs/: the durable job queue (SQLite) and its worker (libcurl: the remote fallback), linked into the CLI only;
# like the CLI they see the public header alone.
JOBS_SRC := $(wildcard jobs/*.c)
JOBS_OBJ := $(patsubst jobs/%.c,$(BUILD)/obj/jobs/%.o,$(JOBS_SRC))
# cli/: the program's main, its options (one table for every command), the config file and the status line.
CLI_SRC := $(wildcard cli/*.c)
CLI_OBJ := $(patsubst cli/%.c,$(BUILD)/obj/cli/%.o,$(CLI_SRC))
# hub/: `deltafin pull` and -hf, models from the Hugging Face Hub (libcurl, cJSON, OpenSSL's sha256), linked into
# the CLI only and seeing the public header alone.
HUB_SRC := $(wildcard hub/*.c)
HUB_OBJ := $(patsubst hub/%.c,$(BUILD)/obj/hub/%.o,$(HUB_SRC))
TEST_SRC := $(wildcard tests/test_*.c)
TESTS   := $(patsubst tests/%.c,$(BUILD)/%,$(TEST_SRC))

# The MPI plugin (plugin/mpi.c, src/base/comm.h): built where Open MPI's mpicc is, loaded only by a process
# that mpirun started (docs/cluster.md). Without mpicc the rest builds and runs alone.
MPICC   ?= mpicc
MPI_PLUGIN := $(if $(shell command -v $(MPICC) 2> /dev/null),$(BUILD)/libdeltafin-mpi.so)

all: $(LIB) $(INTLIB) $(SHLIB) $(TOOLS) $(TESTS) $(MPI_PLUGIN)

$(BUILD)/libdeltafin-mpi.so: plugin/mpi.c src/base/comm.h Makefile
	@mkdir -p $(dir $@)
	OMPI_CC=$(CC) $(MPICC) $(CSTD) $(WARN) $(OPT) -Isrc/base -fPIC -shared -o $@ $< $(LDSAN)

$(BUILD)/obj/types/kern_avx2.o: CFLAGS += -mavx2 -mfma -mf16c
$(BUILD)/obj/types/kern_avx512.o: CFLAGS += -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mavx2 -mfma -mf16c
$(BUILD)/obj/types/amx/kern_amx.o: CFLAGS += -mamx-tile -mamx-int8 -mamx-bf16 -mf16c
$(BUILD)/obj/types/amx/kern_amx_model.o: CFLAGS += -mf16c

# -fPIC so that the objects make a shared library too; -fno-semantic-interposition keeps calls between them as
# direct (and inlinable) as in a program: no symbol of the library is meant to be replaced from outside.
# (The Makefile is a prerequisite: a change of flags rebuilds them.)
$(BUILD)/obj/%.o: src/%.c $(HDRS) Makefile
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -fPIC -fno-semantic-interposition -c $< -o $@

$(BUILD)/obj/tools/%.o: tools/%.c $(HDRS) $(wildcard tools/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itools -c $< -o $@

$(BUILD)/obj/server/%.o: server/%.c server/server.h include/deltafin.h $(wildcard jobs/*.h) $(wildcard cli/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CSTD) $(WARN) $(OPT) -Iinclude -Iserver -Ijobs -Icli -pthread -c $< -o $@

# the chat page, inside the program (server/web.S: .incbin from the repository's root)
$(BUILD)/obj/server/web.o: server/web.S server/web/index.html
	@mkdir -p $(dir $@)
	$(CC) -c $< -o $@

$(INTLIB): $(LIB_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(PUBSYMS): include/deltafin.h scripts/public-symbols.sh
	@mkdir -p $(dir $@)
	./scripts/public-symbols.sh include/deltafin.h > $@.tmp && mv $@.tmp $@

# ld -r (through the compiler driver, so a cross build uses its own linker)
# joins the objects, resolving every internal reference; objcopy then makes
# all but the public functions local.
$(BUILD)/obj/deltafin-public.o: $(LIB_OBJ) $(PUBSYMS)
	$(CC) -r -nostdlib -o $(BUILD)/obj/deltafin-all.o $(LIB_OBJ)
	$(OBJCOPY) --keep-global-symbols=$(PUBSYMS) $(BUILD)/obj/deltafin-all.o $@

$(LIB): $(BUILD)/obj/deltafin-public.o
	rm -f $@ && ar rcs $@ $^

$(BUILD)/deltafin.map: $(PUBSYMS)
	{ echo '{ global:'; sed 's/$$/;/' $<; echo 'local: *; };'; } > $@.tmp && mv $@.tmp $@

$(SHLIB): $(LIB_OBJ) $(BUILD)/deltafin.map
	$(CC) -shared -Wl,-soname,libdeltafin.so.$(SOMAJOR) -Wl,--version-script=$(BUILD)/deltafin.map -o $@ \
		$(LIB_OBJ) $(LDLIBS)
	ln -sf libdeltafin.so.$(VERSION) $(BUILD)/libdeltafin.so.$(SOMAJOR)
	ln -sf libdeltafin.so.$(SOMAJOR) $(BUILD)/libdeltafin.so

$(BUILD)/obj/jobs/%.o: jobs/%.c include/deltafin.h $(wildcard jobs/*.h) $(wildcard cli/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CSTD) $(WARN) $(OPT) -Iinclude -Ijobs -Icli -pthread -c $< -o $@

# The CLI (cli/main.c and what its commands share) is compiled seeing the public header only (and its own
# headers and jobs/'s), and links the public archive.
$(BUILD)/obj/cli/%.o: cli/%.c $(wildcard cli/*.h) $(wildcard jobs/*.h) include/deltafin.h
	@mkdir -p $(dir $@)
	$(CC) $(CSTD) $(WARN) $(OPT) -Iinclude -Icli -Ijobs -pthread -c $< -o $@

$(BUILD)/obj/hub/%.o: hub/%.c hub/hub.h include/deltafin.h
	@mkdir -p $(dir $@)
	$(CC) $(CSTD) $(WARN) $(OPT) -Iinclude -Ihub -pthread -c $< -o $@

$(BUILD)/deltafin: $(SERVER_OBJ) $(JOBS_OBJ) $(HUB_OBJ) $(CLI_OBJ) $(LIB)
	$(CC) $(CFLAGS) -o $@ $^ $(SERVER_LIBS) $(LDLIBS) -lsqlite3 -lcurl -lcrypto

$(patsubst %,$(BUILD)/%,$(LIB_TOOLS)): $(BUILD)/%: $(BUILD)/obj/tools/%.o $(TOOL_COMMON_OBJ) $(INTLIB)
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

$(patsubst %,$(BUILD)/%,$(SOLO_TOOLS)): $(BUILD)/%: $(BUILD)/obj/tools/%.o
	$(CC) $(CFLAGS) -o $@ $^ -lm $(LDSAN)

# the option table's test links the table (cli/opts.c) beside the library
$(BUILD)/test_opts: tests/test_opts.c tests/testutil.h $(BUILD)/obj/cli/opts.o $(INTLIB)
	$(CC) $(CFLAGS) -Icli -Itests -o $@ $< $(BUILD)/obj/cli/opts.o $(INTLIB) $(LDLIBS) -lcmocka

$(BUILD)/test_%: tests/test_%.c tests/testutil.h $(TOOL_COMMON_OBJ) $(INTLIB)
	$(CC) $(CFLAGS) -Itools -Itests -o $@ $< $(TOOL_COMMON_OBJ) $(INTLIB) $(LDLIBS) -lcmocka

# The README's first command: build, make a DeepSeek-shaped MoE model about
# seven times larger than a 64 MiB budget, ask `plan` whether and how fast it
# runs, then run it under that budget (and the real tiny stories model).
demo: all
	$(BUILD)/mkmodel -o $(BUILD)/demo-moe.gguf --preset deepseek-v3-tiny --type q8_0 --n-embd 512 \
	  --experts 64 --n-ff-exp 512 --n-layer 10
	$(BUILD)/deltafin info -m $(BUILD)/demo-moe.gguf
	$(BUILD)/deltafin plan -m $(BUILD)/demo-moe.gguf --mem 64M -c 512
	$(BUILD)/deltafin run -m $(BUILD)/demo-moe.gguf --mem 64M -c 512 -p "Once upon a time" -n 64 \
	  --temp 0.8 --seed 1 --ignore-eos
	@if [ -f ../shared/models/stories260K.gguf ]; then \
	  $(BUILD)/deltafin run -m ../shared/models/stories260K.gguf -p "Once upon a time" -n 120 --temp 0; fi

debug:
	$(MAKE) MODE=debug BUILD=build-debug all

# Tests: the optimized build (and its lower x86 tiers), then the same suite under
# ASan+UBSan, ThreadSanitizer, and the aarch64 (NEON) build under qemu-user; every
# suite runs to its end and the failures are reported together (scripts/test-all.sh).
test: all
	MAKE="$(MAKE)" ./scripts/test-all.sh

# The aarch64 build's test programs under qemu-user (-L /: the multiarch arm64
# libraries that scripts/install-deps.sh installs). Models come from the native mkmodel.
test-cross: cross
	DELTAFIN_SANITIZED=1 DELTAFIN_EXEC="qemu-aarch64 -L /" DELTAFIN_MKMODEL_BUILD=build ./tests/run.sh build-aarch64

test-ref: all
	./scripts/llama-ref.sh build
	./tests/run-ref.sh build

bench: all
	./bench/compare.sh

cross:
	$(MAKE) CC=aarch64-linux-gnu-gcc OBJCOPY=aarch64-linux-gnu-objcopy BUILD=build-aarch64 MPI_PLUGIN= all

# The threading contract under ThreadSanitizer: several threads drive sessions
# of one model through the public API (tests/test_threads.c); any data race fails it.
tsan:
	$(MAKE) MODE=tsan BUILD=build-tsan build-tsan/mkmodel build-tsan/test_threads
	DELTAFIN_BUILD=build-tsan TSAN_OPTIONS="halt_on_error=1 exitcode=66" build-tsan/test_threads

# More of tests/sweep.sh than test-ref runs: 20 random configurations per family and every optional key.
test-sweep: all
	./scripts/llama-ref.sh build
	./tests/sweep.sh $(BUILD) --seeds 20 --keys all --quant 4

fuzz:
	./tests/fuzz.sh

# The man page: the program's own help text (scripts/make-man.sh).
$(BUILD)/deltafin.1: $(BUILD)/deltafin scripts/make-man.sh
	./scripts/make-man.sh $(BUILD)/deltafin $(VERSION) > $@.tmp && mv $@.tmp $@

install: all $(BUILD)/deltafin.1
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR)/pkgconfig $(DESTDIR)$(INCLUDEDIR) \
		$(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(DOCDIR)
	install -m 755 $(BUILD)/deltafin $(DESTDIR)$(BINDIR)/deltafin
	install -m 644 $(LIB) $(DESTDIR)$(LIBDIR)/libdeltafin.a
	install -m 755 $(SHLIB) $(DESTDIR)$(LIBDIR)/libdeltafin.so.$(VERSION)
	ln -sf libdeltafin.so.$(VERSION) $(DESTDIR)$(LIBDIR)/libdeltafin.so.$(SOMAJOR)
	ln -sf libdeltafin.so.$(SOMAJOR) $(DESTDIR)$(LIBDIR)/libdeltafin.so
	install -m 644 include/deltafin.h $(DESTDIR)$(INCLUDEDIR)/deltafin.h
	$(if $(MPI_PLUGIN),install -d $(DESTDIR)$(LIBDIR)/deltafin && install -m 755 $(MPI_PLUGIN) $(DESTDIR)$(LIBDIR)/deltafin/)
	sed -e 's|@PREFIX@|$(PREFIX)|; s|@LIBDIR@|$(LIBDIR)|; s|@INCLUDEDIR@|$(INCLUDEDIR)|; s|@VERSION@|$(VERSION)|' \
		scripts/deltafin.pc.in > $(DESTDIR)$(LIBDIR)/pkgconfig/deltafin.pc
	install -m 644 $(BUILD)/deltafin.1 $(DESTDIR)$(MANDIR)/man1/deltafin.1
	install -m 644 README.md docs/*.md $(DESTDIR)$(DOCDIR)/

uninstall:
	rm -f $(DESTDIR)$(BINDIR)/deltafin $(DESTDIR)$(LIBDIR)/libdeltafin.a $(DESTDIR)$(LIBDIR)/libdeltafin.so \
		$(DESTDIR)$(LIBDIR)/libdeltafin.so.$(SOMAJOR) $(DESTDIR)$(LIBDIR)/libdeltafin.so.$(VERSION) \
		$(DESTDIR)$(INCLUDEDIR)/deltafin.h $(DESTDIR)$(LIBDIR)/pkgconfig/deltafin.pc $(DESTDIR)$(MANDIR)/man1/deltafin.1
	rm -rf $(DESTDIR)$(DOCDIR) $(DESTDIR)$(LIBDIR)/deltafin

clean:
	rm -rf build build-debug build-aarch64 build-fuzz build-tsan

.PHONY: all demo debug test test-cross test-ref test-sweep bench cross fuzz tsan clean install uninstall
