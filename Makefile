# firehose -- build, test, install.
#   make demo    4-rank jobs on this machine showing puts, gets, active messages, rpipe,
#                atomics (shared counter), the MCS lock (remote queue), split-phase barriers,
#                a 3-D halo exchange with strided puts (halo3d), a Co-array Fortran
#                program on libcaf_firehose (coarray_heat)
#   make test    everything CI runs: lint (fmt, clippy), Rust tests (release and dev
#                profiles), the loom model check, ThreadSanitizer, header drift and
#                Fortran interface signatures, man pages (drift, rendering), C tests
#                under Open MPI at 2/4/8 ranks and MPICH at 2, Fortran, pkg-config and
#                CMake consumers, firehose_info, dlopen consumer,
#                Open MPI program on an MPICH library, settings that differ between
#                ranks and a full /dev/shm, the 10^6-operation stress, and the
#                plain-MPI interop loops under both MPIs
#   make bench   benchmarks as ratios against raw MPI in the same run
# Variables: PREFIX DESTDIR MPI (openmpi|mpich) MPICC MPIFC MPIEXEC

MPI      ?= openmpi
ifeq ($(MPI),mpich)
MPICC    ?= mpicc.mpich
MPIFC    ?= mpif90.mpich
MPIEXEC  ?= mpiexec.mpich
MPIEXEC_FLAGS ?=
MPI_PC   ?= mpich
MPI_MATCH = MPICH
PASSENV  =
else
MPICC    ?= mpicc.openmpi
MPIFC    ?= mpif90.openmpi
MPIEXEC  ?= mpirun.openmpi
MPIEXEC_FLAGS ?= --oversubscribe
MPI_PC   ?= ompi
MPI_MATCH = Open MPI
PASSENV  = -x FH_STRESS_OPS
endif
PREFIX   ?= /usr/local
DESTDIR  ?=
NPS      ?= $(if $(filter mpich,$(MPI)),2,2 4 8)

VERSION  := $(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
MAJOR    := $(firstword $(subst ., ,$(VERSION)))
TARGET   := $(CURDIR)/target/$(MPI)
LIBDIR   := $(TARGET)/release
BUILD    := $(CURDIR)/build/$(MPI)
CFLAGS   ?= -O2 -g -Wall -Wextra -Werror -std=c11 -D_GNU_SOURCE
FFLAGS   ?= -O2 -g -Wall -Werror -std=f2008 -fimplicit-none
CARGO_ENV := CARGO_TARGET_DIR=$(TARGET) MPICC=$(MPICC)
export OMPI_ALLOW_RUN_AS_ROOT=1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1

LINK     := -L$(LIBDIR) -Wl,-rpath,$(LIBDIR) -lfirehose
C_TESTS  := $(patsubst c-tests/%.c,$(BUILD)/c-tests/%,$(wildcard c-tests/*.c))
EXAMPLES := $(patsubst mpi-examples/%.c,$(BUILD)/examples/%,$(wildcard mpi-examples/*.c))
BENCHES  := $(patsubst bench/%.c,$(BUILD)/bench/%,$(wildcard bench/*.c))

.PHONY: all caf bench-caf deps lib header check-header man check-man fortran examples c-tests test test-rust loom tsan \
        test-c test-c-mpich test-fortran test-caf test-pkgconfig test-cmake test-info test-dlopen test-mismatch test-settings stress stress-interop lint demo bench bench-peer \
        install uninstall clean

all: lib fortran

deps:
	@scripts/deps.sh

lib: deps
	$(CARGO_ENV) cargo build --release --lib --bin firehose_info
	@ln -sf libfirehose.so $(LIBDIR)/libfirehose.so.$(MAJOR)

header:
	python3 scripts/gen_ffi_atomics.py
	python3 scripts/gen_ffi_vis.py
	$(CARGO_ENV) cargo run -q --release --example gen_header -- include/firehose.h

check-header:
	@mkdir -p $(BUILD)
	$(CARGO_ENV) cargo run -q --release --example gen_header -- $(BUILD)/firehose.h.new
	@diff -u include/firehose.h $(BUILD)/firehose.h.new || \
	  (echo "include/firehose.h is out of date: run 'make header' and commit it" >&2; exit 1)
	@echo "header: include/firehose.h matches the code"
	@! grep -nE '^#define +[A-Za-z_]|^typedef +(struct|enum|union) |^typedef .*\(\*' include/firehose.h | \
	  grep -vE '#define +(FH_|RPIPE_|FIREHOSE_)|typedef +(struct|enum|union) +(fh|rpipe)_|\(\*(fh|rpipe)_' || \
	  (echo "include/firehose.h defines the names above without the library's prefix (internal constants: add them to cbindgen.toml's exclude list)" >&2; exit 1)
	@python3 scripts/gen_ffi_atomics.py $(BUILD)/atomic.rs.new && diff -u src/ffi/atomic.rs $(BUILD)/atomic.rs.new || \
	  (echo "src/ffi/atomic.rs is out of date: run 'python3 scripts/gen_ffi_atomics.py' and commit it" >&2; exit 1)
	@python3 scripts/gen_ffi_vis.py $(BUILD)/vis.rs.new && diff -u src/ffi/vis.rs $(BUILD)/vis.rs.new || \
	  (echo "src/ffi/vis.rs is out of date: run 'python3 scripts/gen_ffi_vis.py' and commit it" >&2; exit 1)
	@scripts/check-fortran.sh

# Fortran module (firehose.mod) and its object.
fortran: $(BUILD)/fortran/firehose.o
$(BUILD)/fortran/firehose.o: include/firehose.f90
	@mkdir -p $(BUILD)/fortran
	$(MPIFC) $(FFLAGS) -J$(BUILD)/fortran -c $< -o $@

$(BUILD)/c-tests/%: c-tests/%.c c-tests/common.h include/firehose.h | lib
	@mkdir -p $(dir $@)
	$(MPICC) $(CFLAGS) -pthread -Iinclude -Ic-tests $< -o $@ $(LINK)

$(BUILD)/examples/%: mpi-examples/%.c mpi-examples/example.h include/firehose.h | lib
	@mkdir -p $(dir $@)
	$(MPICC) $(CFLAGS) -Iinclude $< -o $@ $(LINK)

$(BUILD)/bench/%: bench/%.c bench/bench.h include/firehose.h | lib
	@mkdir -p $(dir $@)
	$(MPICC) $(CFLAGS) -O3 -Iinclude -Ibench $< -o $@ $(LINK) -lm

c-tests: $(filter-out $(BUILD)/c-tests/common,$(C_TESTS))
examples: $(EXAMPLES)

lint:
	cargo fmt --all -- --check
	$(CARGO_ENV) cargo clippy --release --all-targets -- -D warnings

# The Rust suites in the dev profile (optimized, with debug assertions and overflow
# checks: every table and allocator operation checks its invariants). One build; the
# release library the C suites load is built by `lib`.
test-rust: deps
	$(CARGO_ENV) cargo test

# The checking builds (loom, tsan) have target directories of their own: they skip
# the release profile's link-time optimization and debug information.
CHECK_PROFILE := CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_DEBUG=0

# Model check of the Firehose-SMP core (tests/loom_smp.rs): every interleaving of
# threads sharing a firehose table, its deadlock-avoidance flag and condvar.
loom: deps
	RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=$(CURDIR)/target/loom MPICC=$(MPICC) $(CHECK_PROFILE) \
	  cargo test --release --test loom_smp

# ThreadSanitizer on the concurrent core (tests/smp.rs: many threads sharing one
# context's tables on the sim conduit). Stable toolchain with RUSTC_BOOTSTRAP (no
# nightly here); std is not instrumented, scripts/tsan.supp says what that hides.
HOST_TRIPLE := $(shell rustc -vV 2>/dev/null | sed -n 's/^host: //p')
tsan: deps
	RUSTC_BOOTSTRAP=1 RUSTFLAGS="-Zsanitizer=thread -Cunsafe-allow-abi-mismatch=sanitizer" \
	  CARGO_TARGET_DIR=$(CURDIR)/target/tsan MPICC=$(MPICC) $(CHECK_PROFILE) \
	  TSAN_OPTIONS="suppressions=$(CURDIR)/scripts/tsan.supp halt_on_error=1" \
	  cargo test --release --target $(HOST_TRIPLE) --test smp

# C tests under the selected MPI at $(NPS) ranks.
test-c: c-tests
	@MPIEXEC="$(MPIEXEC) $(MPIEXEC_FLAGS)" NPS="$(NPS)" MPI=$(MPI) scripts/run-c-tests.sh $(BUILD)/c-tests

# The MPICH pass names MPICH's wrappers itself: an MPICC/MPIEXEC exported for the
# Open MPI build would otherwise compile the MPICH tests with Open MPI's.
MPICH_VARS := MPI=mpich MPICC=mpicc.mpich MPIFC=mpif90.mpich MPIEXEC=mpiexec.mpich MPIEXEC_FLAGS=

test-c-mpich:
	$(MAKE) $(MPICH_VARS) test-c

test-fortran: fortran lib
	@mkdir -p $(BUILD)/fortran
	$(MPIFC) $(FFLAGS) -I$(BUILD)/fortran tests/fortran/test_basic.f90 $(BUILD)/fortran/firehose.o -o $(BUILD)/fortran/test_basic $(LINK)
	timeout 120 $(MPIEXEC) $(MPIEXEC_FLAGS) -np 2 $(BUILD)/fortran/test_basic
	$(MPIFC) $(FFLAGS) -I$(BUILD)/fortran tests/fortran/interop_basic.f90 $(BUILD)/fortran/firehose.o -o $(BUILD)/fortran/interop_basic $(LINK)
	@for np in 2 4 8; do for shm in 1 0; do \
	  echo "interop_basic (Fortran, MPI_BARRIER only) np=$$np FH_SHM=$$shm"; \
	  FH_SHM=$$shm timeout 120 $(MPIEXEC) $(MPIEXEC_FLAGS) $(if $(filter mpich,$(MPI)),,-x FH_SHM) -np $$np $(BUILD)/fortran/interop_basic || exit 1; \
	done; done
	$(MPIFC) $(FFLAGS) -I$(BUILD)/fortran tests/fortran/test_vis.f90 $(BUILD)/fortran/firehose.o -o $(BUILD)/fortran/test_vis $(LINK)
	@for np in 2 4 8; do for shm in 1 0; do \
	  echo "test_vis (Fortran array section with fh_puts) np=$$np FH_SHM=$$shm"; \
	  FH_SHM=$$shm timeout 120 $(MPIEXEC) $(MPIEXEC_FLAGS) $(if $(filter mpich,$(MPI)),,-x FH_SHM) -np $$np $(BUILD)/fortran/test_vis || exit 1; \
	done; done
	$(MPIFC) $(FFLAGS) -I$(BUILD)/fortran tests/fortran/test_extended.f90 $(BUILD)/fortran/firehose.o -o $(BUILD)/fortran/test_extended $(LINK)
	@for np in 2 4 8; do \
	  echo "test_extended (Fortran: value forms, memset, access region, test_some, hsl) np=$$np"; \
	  timeout 120 $(MPIEXEC) $(MPIEXEC_FLAGS) -np $$np $(BUILD)/fortran/test_extended || exit 1; \
	done
	$(MPIFC) $(FFLAGS) -I$(BUILD)/fortran tests/fortran/interop_f08.f90 $(BUILD)/fortran/firehose.o -o $(BUILD)/fortran/interop_f08 $(LINK)
	@for np in 2 4 8; do \
	  echo "interop_f08 (use mpi_f08, MPI_Barrier serves a firehose move) np=$$np FH_SHM=0"; \
	  FH_SHM=0 timeout 120 $(MPIEXEC) $(MPIEXEC_FLAGS) $(if $(filter mpich,$(MPI)),,-x FH_SHM) -np $$np $(BUILD)/fortran/interop_f08 || exit 1; \
	done

# libcaf_firehose: the Co-array Fortran runtime (gfortran -fcoarray=lib) on firehose.
CAF_SRC  := $(wildcard caf/*.c)
CAF_DIR  := $(BUILD)/caf
CAF_OBJ  := $(patsubst caf/%.c,$(CAF_DIR)/obj/%.o,$(CAF_SRC))
CAF_LINK := -L$(CAF_DIR) -Wl,-rpath,$(CAF_DIR) -lcaf_firehose $(LINK)
caf: $(CAF_DIR)/libcaf_firehose.so $(CAF_DIR)/libcaf_firehose.a
$(CAF_DIR)/obj/%.o: caf/%.c caf/caf.h include/firehose.h
	@mkdir -p $(CAF_DIR)/obj
	$(MPICC) $(filter-out -std=c11,$(CFLAGS)) -std=gnu11 -fPIC -Iinclude -c $< -o $@
$(CAF_DIR)/libcaf_firehose.so: $(CAF_OBJ) caf/exports.map lib
	$(MPICC) -shared -Wl,-soname,libcaf_firehose.so.$(MAJOR) -Wl,--version-script=caf/exports.map \
	  -o $@ $(CAF_OBJ) $(LINK)
	@ln -sf libcaf_firehose.so $(CAF_DIR)/libcaf_firehose.so.$(MAJOR)
$(CAF_DIR)/libcaf_firehose.a: $(CAF_OBJ)
	rm -f $@ && ar rcs $@ $(CAF_OBJ)

# Coarray programs (tests/caf) at 1-4 images, FH_SHM=1 and 0, and the ABI coverage.
test-caf: caf
	@scripts/check-caf-abi.sh $(CAF_DIR)/libcaf_firehose.so $(patsubst mpif90%,gfortran,$(notdir $(MPIFC)))
	@scripts/run-caf-tests.sh "$(MPIFC)" "$(MPIEXEC) $(MPIEXEC_FLAGS)" $(BUILD) "$(CAF_LINK)"

# Install into a temporary prefix, build a consumer with pkg-config only, run it.
test-pkgconfig: lib fortran
	@scripts/test-pkgconfig.sh "$(MAKE)" "$(MPICC)" "$(MPIEXEC) $(MPIEXEC_FLAGS)" "$(MPIFC)"

# Settings that differ between ranks: every setting, even and odd ranks set apart
# (scripts/test-settings.sh).
test-settings: lib
	@mkdir -p $(BUILD)
	$(MPICC) $(CFLAGS) -Iinclude -Ic-tests tests/settings/settings_agree.c -o $(BUILD)/settings_agree $(LINK)
	@scripts/test-settings.sh $(BUILD)/settings_agree "$(MPIEXEC) $(MPIEXEC_FLAGS)" 4
	@scripts/test-shm-full.sh $(BUILD)/settings_agree "$(MPIEXEC) $(MPIEXEC_FLAGS)"

# A CMake project using the installed package: C and Fortran, shared and static,
# relocated, version and MPI checks (scripts/test-cmake.sh).
test-cmake: lib fortran
	@scripts/test-cmake.sh "$(MAKE)" "$(MPIEXEC) $(MPIEXEC_FLAGS)" $(MPI)

# firehose_info's report, its -c form and its exit statuses (scripts/test-info.sh).
test-info: lib
	@scripts/test-info.sh $(LIBDIR)/firehose_info

# Man pages: generated from the header (section 3) and the settings table (firehose.7).
man: lib
	@mkdir -p $(BUILD)
	$(LIBDIR)/firehose_info --settings-tsv > $(BUILD)/settings.tsv
	python3 scripts/gen-man.py man --settings $(BUILD)/settings.tsv

# The committed pages match the header and the settings, and render without warnings.
check-man: lib
	@mkdir -p $(BUILD)
	@$(LIBDIR)/firehose_info --settings-tsv > $(BUILD)/settings.tsv
	@scripts/check-man.sh $(BUILD)/settings.tsv

# A runtime that dlopen()s libfirehose.so and calls through dlsym.
test-dlopen: lib
	@mkdir -p $(BUILD)
	$(MPICC) $(CFLAGS) -Iinclude tests/dlopen/dlopen_consumer.c -o $(BUILD)/dlopen_consumer -ldl
	timeout 120 $(MPIEXEC) $(MPIEXEC_FLAGS) -np 2 $(BUILD)/dlopen_consumer $(LIBDIR)/libfirehose.so

# A program built for Open MPI linked to a library built for MPICH must get a clear
# FH_ERR_MPI from fh_init, not a crash.
test-mismatch:
	$(MAKE) $(MPICH_VARS) lib
	@mkdir -p build
	mpicc.openmpi $(CFLAGS) -Iinclude tests/mismatch/mismatch.c -o build/mismatch \
	  -L$(CURDIR)/target/mpich/release -Wl,-rpath,$(CURDIR)/target/mpich/release -lfirehose
	timeout 60 mpirun.openmpi -np 1 build/mismatch

# 10^6 random puts, gets and AMs across 8 ranks, every result checked.
stress: c-tests
	FH_STRESS_OPS=125000 timeout 600 $(MPIEXEC) $(MPIEXEC_FLAGS) $(PASSENV) -np 8 $(BUILD)/c-tests/test_stress

# The plain-MPI programs (c-tests/interop_*: MPI_Init, MPI synchronisation only) and the
# memory-churn test, looped at 8 ranks on both paths: a race that shows 1 time in 3 is
# a hang for somebody. `make test` runs INTEROP_LOOPS=3; `make stress-interop` 20.
INTEROP_LOOPS ?= 20
stress-interop: c-tests
	@MPIEXEC="$(MPIEXEC) $(MPIEXEC_FLAGS)" MPI=$(MPI) LOOPS=$(INTEROP_LOOPS) scripts/loop-interop.sh $(BUILD)/c-tests

test: deps lint test-rust loom tsan check-header lib check-man test-c test-c-mpich test-fortran test-pkgconfig test-cmake test-info test-dlopen test-mismatch test-settings test-caf stress
	$(MAKE) stress-interop INTEROP_LOOPS=3
	$(MAKE) $(MPICH_VARS) stress-interop INTEROP_LOOPS=1
	@echo "make test: all suites passed"

demo: lib $(BUILD)/examples/demo $(BUILD)/examples/bitonic $(BUILD)/examples/rpipe \
      $(BUILD)/examples/shared_counter $(BUILD)/examples/lock_queue $(BUILD)/examples/split_barrier \
      $(BUILD)/examples/halo3d $(BUILD)/examples/coarray_heat
	timeout 300 $(MPIEXEC) $(MPIEXEC_FLAGS) -np 4 $(BUILD)/examples/demo
	@echo "bitonic with FH_SHM=0: node peers' memory then goes through firehose (as off-node"
	@echo "peers' would), not the kernel's single copy, so the hit rate below is firehose's"
	FH_SHM=0 FH_STATS=1 timeout 120 $(MPIEXEC) $(MPIEXEC_FLAGS) $(if $(filter mpich,$(MPI)),,-x FH_SHM) -np 4 $(BUILD)/examples/bitonic
	timeout 120 $(MPIEXEC) $(MPIEXEC_FLAGS) -np 4 $(BUILD)/examples/rpipe
	timeout 120 $(MPIEXEC) $(MPIEXEC_FLAGS) -np 4 $(BUILD)/examples/shared_counter
	timeout 120 $(MPIEXEC) $(MPIEXEC_FLAGS) -np 4 $(BUILD)/examples/lock_queue
	timeout 120 $(MPIEXEC) $(MPIEXEC_FLAGS) -np 4 $(BUILD)/examples/split_barrier
	timeout 120 $(MPIEXEC) $(MPIEXEC_FLAGS) -np 4 $(BUILD)/examples/halo3d
	@echo "coarray_heat: a Co-array Fortran program (gfortran -fcoarray=lib) on libcaf_firehose"
	timeout 120 $(MPIEXEC) $(MPIEXEC_FLAGS) -np 4 $(BUILD)/examples/coarray_heat

$(BUILD)/examples/coarray_heat: mpi-examples/coarray_heat.f90 caf
	@mkdir -p $(BUILD)/examples
	$(MPIFC) -fcoarray=lib $(filter-out -std=f2008,$(FFLAGS)) -std=f2018 $< -o $@ $(CAF_LINK)

bench: lib $(BENCHES) bench-caf bench-peer
	@mkdir -p bench-results
	@MPIEXEC="$(MPIEXEC) $(MPIEXEC_FLAGS)" scripts/run-bench.sh $(BUILD)/bench bench-results

# firehose against Open MPI's OpenSHMEM on the same operations (issue 19 part 6), at
# 2, 4 and 8 ranks, 3 interleaved runs; firehose alone when oshcc is missing.
$(BUILD)/bench/peer_fh: bench/peer/peer_fh.c bench/peer/peer.h include/firehose.h | lib
	@mkdir -p $(dir $@)
	$(MPICC) $(CFLAGS) -O3 -Iinclude -Ibench/peer $< -o $@ $(LINK)

bench-peer: $(BUILD)/bench/peer_fh
	@mkdir -p bench-results
	@if command -v oshcc >/dev/null; then \
	  oshcc -O3 -Wall -Wextra -Ibench/peer bench/peer/peer_shmem.c -o $(BUILD)/bench/peer_shmem && \
	  python3 scripts/run-peer-bench.py bench-results $(BUILD)/bench/peer_fh $(BUILD)/bench/peer_shmem "$(MPIEXEC) $(MPIEXEC_FLAGS)" 3; \
	else \
	  echo "bench-peer: oshcc (Open MPI's OpenSHMEM) not found: firehose's times only"; \
	  python3 scripts/run-peer-bench.py bench-results $(BUILD)/bench/peer_fh "" "$(MPIEXEC) $(MPIEXEC_FLAGS)" 3; \
	fi

# libcaf_firehose against OpenCoarrays on the same coarray program (2 and 4 images).
bench-caf: caf
	@mkdir -p bench-results
	python3 scripts/run-caf-bench.py bench-results "$(MPIEXEC) $(MPIEXEC_FLAGS)" "$(MPIFC)" "$(CAF_LINK)" 3

# What make install writes, below $(DESTDIR)$(PREFIX).
INSTALLED = lib/libfirehose.so lib/libfirehose.so.$(MAJOR) lib/libfirehose.so.$(VERSION) \
            lib/libfirehose.a lib/libfirehose_fortran.a include/firehose.h \
            lib/pkgconfig/firehose.pc bin/firehose_info \
            lib/cmake/firehose/firehoseConfig.cmake lib/cmake/firehose/firehoseConfigVersion.cmake \
            lib/libcaf_firehose.so lib/libcaf_firehose.so.$(MAJOR) lib/libcaf_firehose.so.$(VERSION) \
            lib/libcaf_firehose.a lib/pkgconfig/firehose-caf.pc bin/fhcaf bin/fhcafrun
SUBST = -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(VERSION)|g' -e 's|@MAJOR@|$(MAJOR)|g' \
        -e 's|@MPI@|$(MPI)|g' -e 's|@MPI_PC@|$(MPI_PC)|' -e 's|@MPI_MATCH@|$(MPI_MATCH)|' \
        -e "s|@MPICC_PATH@|$$(command -v $(MPICC))|" -e "s|@MPIFC_PATH@|$$(command -v $(MPIFC))|" \
        -e "s|@MPIEXEC_PATH@|$$(command -v $(MPIEXEC))|"

install: lib fortran caf
	install -d $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/include/firehose $(DESTDIR)$(PREFIX)/lib/pkgconfig \
	  $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/cmake/firehose \
	  $(DESTDIR)$(PREFIX)/share/man/man1 $(DESTDIR)$(PREFIX)/share/man/man3 $(DESTDIR)$(PREFIX)/share/man/man7
	install -m 755 $(LIBDIR)/libfirehose.so $(DESTDIR)$(PREFIX)/lib/libfirehose.so.$(VERSION)
	ln -sf libfirehose.so.$(VERSION) $(DESTDIR)$(PREFIX)/lib/libfirehose.so.$(MAJOR)
	ln -sf libfirehose.so.$(MAJOR) $(DESTDIR)$(PREFIX)/lib/libfirehose.so
	install -m 644 $(LIBDIR)/libfirehose.a $(DESTDIR)$(PREFIX)/lib/libfirehose.a
	rm -f $(BUILD)/fortran/libfirehose_fortran.a
	ar rcs $(BUILD)/fortran/libfirehose_fortran.a $(BUILD)/fortran/firehose.o
	install -m 644 $(BUILD)/fortran/libfirehose_fortran.a $(DESTDIR)$(PREFIX)/lib/libfirehose_fortran.a
	install -m 755 $(LIBDIR)/firehose_info $(DESTDIR)$(PREFIX)/bin/firehose_info
	install -m 644 include/firehose.h $(DESTDIR)$(PREFIX)/include/firehose.h
	install -m 644 include/firehose.f90 $(BUILD)/fortran/firehose.mod $(DESTDIR)$(PREFIX)/include/firehose/
	sed $(SUBST) -e "s|@MPI_LIBS@|$$(pkg-config --libs $(MPI_PC))|" \
	    pkgconfig/firehose.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/firehose.pc
	sed $(SUBST) cmake/firehoseConfig.cmake.in > $(DESTDIR)$(PREFIX)/lib/cmake/firehose/firehoseConfig.cmake
	sed $(SUBST) cmake/firehoseConfigVersion.cmake.in > $(DESTDIR)$(PREFIX)/lib/cmake/firehose/firehoseConfigVersion.cmake
	install -m 755 $(CAF_DIR)/libcaf_firehose.so $(DESTDIR)$(PREFIX)/lib/libcaf_firehose.so.$(VERSION)
	ln -sf libcaf_firehose.so.$(VERSION) $(DESTDIR)$(PREFIX)/lib/libcaf_firehose.so.$(MAJOR)
	ln -sf libcaf_firehose.so.$(MAJOR) $(DESTDIR)$(PREFIX)/lib/libcaf_firehose.so
	install -m 644 $(CAF_DIR)/libcaf_firehose.a $(DESTDIR)$(PREFIX)/lib/libcaf_firehose.a
	sed $(SUBST) pkgconfig/firehose-caf.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/firehose-caf.pc
	sed $(SUBST) caf/bin/fhcaf.in > $(DESTDIR)$(PREFIX)/bin/fhcaf
	sed $(SUBST) caf/bin/fhcafrun.in > $(DESTDIR)$(PREFIX)/bin/fhcafrun
	chmod 755 $(DESTDIR)$(PREFIX)/bin/fhcaf $(DESTDIR)$(PREFIX)/bin/fhcafrun
	install -m 644 man/man1/*.1 $(DESTDIR)$(PREFIX)/share/man/man1/
	install -m 644 man/man3/*.3 $(DESTDIR)$(PREFIX)/share/man/man3/
	install -m 644 man/man7/*.7 $(DESTDIR)$(PREFIX)/share/man/man7/

uninstall:
	rm -f $(addprefix $(DESTDIR)$(PREFIX)/,$(INSTALLED))
	rm -f $(addprefix $(DESTDIR)$(PREFIX)/share/,$(wildcard man/man1/*.1 man/man3/*.3 man/man7/*.7))
	rm -rf $(DESTDIR)$(PREFIX)/include/firehose
	-rmdir $(DESTDIR)$(PREFIX)/lib/cmake/firehose 2>/dev/null

clean:
	rm -rf target build bench-results
