! firehose.f90 -- Fortran 2008 interface to the firehose C API (include/firehose.h).
!
! Every function of firehose.h is available under the same name through a bind(C)
! interface, with the header's constants as named parameters and fh_config_t as an
! interoperable derived type. The rules of firehose.h apply unchanged (statuses,
! handler rules, threads); read it for what each call does. fh_stats_t,
! fh_thread_stats_t and rpipe_stats_t are interoperable derived types too.
!
! Mapping of the C types:
!   fh_ctx_t *, fh_token_t *, void * buffers, const char *, fh_config_t *
!                              type(c_ptr), value      (use c_loc(x) / c_null_ptr)
!   fh_ctx_t **ctx_out        type(c_ptr), intent(out)
!   fh_handle_t                integer(c_int64_t), value   (FH_HANDLE_NULL is 0)
!   fh_handle_t *h_out         integer(c_int64_t), intent(out)
!   fh_handle_t *hs (arrays)   integer(c_int64_t), intent(inout) :: hs(*)
!   const uint64_t *args       integer(c_int64_t), intent(in) :: args(*)
!   size_t                     integer(c_size_t), value
!   int, unsigned int          integer(c_int), value
!   fh_am_handler_t            type(c_funptr), value  (c_funloc of a bind(C)
!                              subroutine with the fh_am_handler interface below)
!   fh_pin_t *, fh_stats_t *, fh_thread_stats_t *
!                              type(c_ptr), value      (c_loc(stats) for the stats types)
!   fh_pin_t **pin_out         type(c_ptr), intent(out)
!   const void **addr_out      type(c_ptr), intent(out)
!   size_t *len_out            integer(c_size_t), intent(out)
!   fh_pin_cb_t                type(c_funptr), value  (c_funloc of a bind(C)
!                              subroutine with the fh_pin_cb interface below, or
!                              c_null_funptr to block)
!   fh_reduce_fn_t             type(c_funptr), value  (c_funloc of a bind(C)
!                              subroutine with the fh_reduce_fn interface below)
!   int comm_f                 integer(c_int), value: the Fortran MPI communicator
!                              handle itself (e.g. MPI_COMM_WORLD from `use mpi`)
!   rpipe_t *, rpipe_stats_t * type(c_ptr), value      (c_loc(st) for rpipe_stats_t)
!   rpipe_t **pipe_out         type(c_ptr), intent(out)
!   rpipe_addr_t               integer(c_int64_t), value   (a C uint64_t, never 0)
!   rpipe_addr_t *addr_out     integer(c_int64_t), intent(out)
!   void * (rpipe_rmem)        type(c_ptr)             (c_f_pointer to use the bytes;
!                              c_associated is false on error)
!   uint32_t *raddr, int32_t *raddr, uint64_t *raddr, int64_t *raddr (the atomic word,
!   fh_atomic_*)               type(c_ptr), value      (c_loc(word) for your own rank,
!                              else the address the owner sent you)
!   uint32_t, int32_t          integer(c_int32_t), value   (unsigned values as the same
!                              bits: 2**31 and up read as negative numbers)
!   uint64_t, int64_t (also the barrier id)
!                              integer(c_int64_t), value   (same rule for unsigned)
!   uint32_t *old_out, *value_out (int32_t the same)
!                              integer(c_int32_t), intent(out)
!   uint64_t *old_out, *value_out (int64_t the same)
!                              integer(c_int64_t), intent(out)
!                              (in the _nb forms also asynchronous: the value is valid
!                              after fh_wait on h_out, so give the actual argument the
!                              asynchronous or target attribute)
!   fh_lock_t *                type(c_ptr), value
!   fh_lock_t **lock_out       type(c_ptr), intent(out)
!   fh_dtype_t, fh_op_t        integer(c_int), value   (FH_INT32.. / FH_SUM.. below)
!
! Convenience (not in the C header): fh_strerror_str(status) and fh_last_error_str()
! return the messages as Fortran strings.
!
! Build: compile this file with the MPI Fortran compiler of the MPI libfirehose was
! built for, `use firehose`, link with -lfirehose.
module firehose
  use, intrinsic :: iso_c_binding
  implicit none

  ! ---- version ----
  integer(c_int), parameter :: FH_VERSION_MAJOR = 0
  integer(c_int), parameter :: FH_VERSION_MINOR = 1
  integer(c_int), parameter :: FH_VERSION_PATCH = 0
  character(len=*), parameter :: FH_VERSION_STRING = "0.1.0"

  ! ---- status codes ----
  integer(c_int), parameter :: FH_OK = 0
  integer(c_int), parameter :: FH_NOT_READY = 1
  integer(c_int), parameter :: FH_ERR_INVALID_ARG = -1
  integer(c_int), parameter :: FH_ERR_BAD_RANK = -2
  integer(c_int), parameter :: FH_ERR_NO_MEMORY = -3
  integer(c_int), parameter :: FH_ERR_NO_RESOURCE = -4
  integer(c_int), parameter :: FH_ERR_ACCESS = -5
  integer(c_int), parameter :: FH_ERR_NOT_PINNED = -6
  integer(c_int), parameter :: FH_ERR_BARRIER_MISMATCH = -7
  integer(c_int), parameter :: FH_ERR_STATE = -8
  integer(c_int), parameter :: FH_ERR_MPI = -9
  integer(c_int), parameter :: FH_ERR_TRANSPORT = -10
  integer(c_int), parameter :: FH_ERR_UNSUPPORTED = -11
  integer(c_int), parameter :: FH_ERR_VERSION = -12
  integer(c_int), parameter :: FH_ERR_INTERNAL = -13

  ! ---- fh_config_t field values ----
  integer(c_int), parameter :: FH_PROGRESS_POLL = 0
  integer(c_int), parameter :: FH_PROGRESS_THREAD = 1
  integer(c_int), parameter :: FH_PIN_MLOCK = 0
  integer(c_int), parameter :: FH_PIN_NONE = 1
  integer(c_int), parameter :: FH_THREAD_SINGLE = 0
  integer(c_int), parameter :: FH_THREAD_FUNNELED = 1
  integer(c_int), parameter :: FH_THREAD_SERIALIZED = 2
  integer(c_int), parameter :: FH_THREAD_MULTIPLE = 3

  ! ---- which for fh_wait_nbi / fh_test_nbi ----
  integer(c_int), parameter :: FH_NBI_PUTS = 1
  integer(c_int), parameter :: FH_NBI_GETS = 2
  integer(c_int), parameter :: FH_NBI_ALL = 3

  ! ---- active message handler indices for the application ----
  integer(c_int), parameter :: FH_AM_INDEX_USER_MIN = 128
  integer(c_int), parameter :: FH_AM_INDEX_USER_MAX = 255

  ! ---- handles ----
  integer(c_int64_t), parameter :: FH_HANDLE_NULL = 0_c_int64_t

  ! ---- split-phase barrier flags ----
  integer(c_int), parameter :: FH_BARRIER_ANONYMOUS = 1
  integer(c_int), parameter :: FH_WORD_LOCK_TRY = 1
  integer(c_int), parameter :: FH_SIGNAL_SET = 0
  integer(c_int), parameter :: FH_SIGNAL_ADD = 1
  integer(c_int), parameter :: FH_CMP_EQ = 0
  integer(c_int), parameter :: FH_CMP_NE = 1
  integer(c_int), parameter :: FH_CMP_GT = 2
  integer(c_int), parameter :: FH_CMP_GE = 3
  integer(c_int), parameter :: FH_CMP_LT = 4
  integer(c_int), parameter :: FH_CMP_LE = 5

  ! ---- reduction element types (fh_dtype_t) and operations (fh_op_t) ----
  integer(c_int), parameter :: FH_INT32 = 0
  integer(c_int), parameter :: FH_INT64 = 1
  integer(c_int), parameter :: FH_UINT32 = 2
  integer(c_int), parameter :: FH_UINT64 = 3
  integer(c_int), parameter :: FH_FLOAT = 4
  integer(c_int), parameter :: FH_DOUBLE = 5
  integer(c_int), parameter :: FH_INT8 = 6
  integer(c_int), parameter :: FH_INT16 = 7
  integer(c_int), parameter :: FH_UINT8 = 8
  integer(c_int), parameter :: FH_UINT16 = 9
  integer(c_int), parameter :: FH_CFLOAT = 10
  integer(c_int), parameter :: FH_CDOUBLE = 11
  integer(c_int), parameter :: FH_SUM = 0
  integer(c_int), parameter :: FH_PROD = 1
  integer(c_int), parameter :: FH_MIN = 2
  integer(c_int), parameter :: FH_MAX = 3
  integer(c_int), parameter :: FH_BAND = 4
  integer(c_int), parameter :: FH_BOR = 5
  integer(c_int), parameter :: FH_BXOR = 6
  integer(c_int), parameter :: FH_LAND = 7
  integer(c_int), parameter :: FH_LOR = 8

  ! ---- rpipe_open: role, mode (RPIPE_PULL is a flag to OR in: ior) and policy ----
  integer(c_int), parameter :: RPIPE_WRITER = 1
  integer(c_int), parameter :: RPIPE_READER = 2
  integer(c_int), parameter :: RPIPE_BOTH = 3
  integer(c_int), parameter :: RPIPE_HALF_DUPLEX = 0
  integer(c_int), parameter :: RPIPE_FULL_DUPLEX = 1
  integer(c_int), parameter :: RPIPE_PULL = 2
  integer(c_int), parameter :: RPIPE_NEXT_FIT = 0
  integer(c_int), parameter :: RPIPE_FIRST_FIT = 1
  integer(c_int), parameter :: RPIPE_BEST_FIT = 2
  integer(c_int), parameter :: RPIPE_WORST_FIT = 3

  ! One piece of a vector transfer (mirrors struct fh_memvec_t): len bytes at addr.
  type, bind(C) :: fh_memvec_t
    type(c_ptr) :: addr
    integer(c_size_t) :: len
  end type fh_memvec_t

  ! Settings (mirrors struct fh_config_t). Initialise with
  ! fh_config_init(c_loc(cfg)), change fields, pass c_loc(cfg) to fh_init_comm_f.
  ! Unsigned C fields are integer(c_int) here.
  type, bind(C) :: fh_config_t
    integer(c_size_t) :: struct_size
    integer(c_int) :: progress
    integer(c_int) :: progress_interval_us
    integer(c_size_t) :: heap_size
    integer(c_size_t) :: am_max_medium
    integer(c_size_t) :: am_max_long
    integer(c_int) :: am_credits
    integer(c_int) :: am_recv_buffers
    integer(c_int) :: pin
    integer(c_int) :: mpi_thread
    integer(c_int) :: verbose
  end type fh_config_t

  ! Firehose and RMA statistics (mirrors struct fh_stats_t; every field is a C
  ! uint64_t, integer(c_int64_t) here). Set struct_size = c_sizeof(stats), then
  ! fh_stats_get(ctx, c_loc(stats)).
  type, bind(C) :: fh_stats_t
    integer(c_int64_t) :: struct_size
    integer(c_int64_t) :: hits
    integer(c_int64_t) :: misses
    integer(c_int64_t) :: pending_hits
    integer(c_int64_t) :: local_hits
    integer(c_int64_t) :: local_misses
    integer(c_int64_t) :: try_hits
    integer(c_int64_t) :: try_misses
    integer(c_int64_t) :: partial_pins
    integer(c_int64_t) :: moves_sent
    integer(c_int64_t) :: moves_handled
    integer(c_int64_t) :: putinmove
    integer(c_int64_t) :: pins
    integer(c_int64_t) :: unpins
    integer(c_int64_t) :: bytes_pinned
    integer(c_int64_t) :: bytes_pinned_peak
    integer(c_int64_t) :: limit_bytes
    integer(c_int64_t) :: victim_local_bytes
    integer(c_int64_t) :: victim_remote
    integer(c_int64_t) :: firehoses_used
    integer(c_int64_t) :: firehoses_per_peer
    integer(c_int64_t) :: mode
    integer(c_int64_t) :: unit_bytes
    integer(c_int64_t) :: stall_ns
    integer(c_int64_t) :: am_sent
    integer(c_int64_t) :: am_handled
    integer(c_int64_t) :: access_refused
    integer(c_int64_t) :: mlock_failures
    integer(c_int64_t) :: puts
    integer(c_int64_t) :: gets
    integer(c_int64_t) :: put_bytes
    integer(c_int64_t) :: get_bytes
    integer(c_int64_t) :: da_entries
    integer(c_int64_t) :: da_wins
    integer(c_int64_t) :: rollbacks
    integer(c_int64_t) :: da_waits
    integer(c_int64_t) :: da_stall_ns
  end type fh_stats_t

  ! The calling thread's firehose-SMP counters (mirrors struct fh_thread_stats_t;
  ! every field a C uint64_t). fh_stats_thread_get(c_loc(tstats)) sets struct_size.
  type, bind(C) :: fh_thread_stats_t
    integer(c_int64_t) :: struct_size
    integer(c_int64_t) :: requests
    integer(c_int64_t) :: da_entries
    integer(c_int64_t) :: da_wins
    integer(c_int64_t) :: rollbacks
    integer(c_int64_t) :: da_waits
    integer(c_int64_t) :: stall_ns
  end type fh_thread_stats_t

  ! Counters and heap state of one end of a pipe (mirrors struct rpipe_stats_t; the
  ! C uint64_t fields are integer(c_int64_t) here, heap_fragmentation a C double).
  ! No struct_size: rpipe_stats(p, c_loc(st)) fills it all.
  type, bind(C) :: rpipe_stats_t
    integer(c_int64_t) :: messages_written
    integer(c_int64_t) :: messages_read
    integer(c_int64_t) :: bytes_written
    integer(c_int64_t) :: bytes_read
    integer(c_int64_t) :: rmalloc_waits
    integer(c_int64_t) :: free_syncs
    integer(c_int64_t) :: frees_seen
    integer(c_int64_t) :: refused
    integer(c_int64_t) :: discarded
    integer(c_int64_t) :: max_message
    integer(c_int64_t) :: heap_free_bytes
    integer(c_int64_t) :: heap_largest_free
    integer(c_int64_t) :: heap_allocations
    real(c_double) :: heap_fragmentation
  end type rpipe_stats_t

  ! The interface an active message handler must have (pass c_funloc(handler)).
  ! args points to nargs 64-bit arguments (c_f_pointer(args, a, [nargs])); buf to
  ! nbytes of payload. Both are valid only during the call.
  abstract interface
    subroutine fh_am_handler(token, buf, nbytes, args, nargs, user) bind(C)
      import :: c_ptr, c_size_t
      type(c_ptr), value :: token
      type(c_ptr), value :: buf
      integer(c_size_t), value :: nbytes
      type(c_ptr), value :: args
      integer(c_size_t), value :: nargs
      type(c_ptr), value :: user
    end subroutine fh_am_handler
  end interface

  ! The interface of a fh_remote_pin callback (pass c_funloc(callback)): pin is the
  ! new pin (the callback owns it: fh_release it) or c_null_ptr with an error status.
  abstract interface
    subroutine fh_pin_cb(pin, status, arg) bind(C)
      import :: c_ptr, c_int
      type(c_ptr), value :: pin
      integer(c_int), value :: status
      type(c_ptr), value :: arg
    end subroutine fh_pin_cb
  end interface

  ! The interface of a user-defined reduction for fh_reduce_fn / fh_allreduce_fn
  ! (pass c_funloc(fn)): inout(i) = inout(i) op in(i) for count elements of the
  ! call's elem_size; inout holds the lower ranks' side.
  abstract interface
    subroutine fh_reduce_fn(inout, input, count, user) bind(C)
      import :: c_ptr, c_size_t
      type(c_ptr), value :: inout
      type(c_ptr), value :: input
      integer(c_size_t), value :: count
      type(c_ptr), value :: user
    end subroutine fh_reduce_fn
  end interface

  interface
    ! ---- status codes, errors and versions ----
    function fh_strerror(status) bind(C, name="fh_strerror")
      import :: c_int, c_ptr
      integer(c_int), value :: status
      type(c_ptr) :: fh_strerror
    end function fh_strerror

    function fh_last_error(buf, len) bind(C, name="fh_last_error")
      import :: c_ptr, c_size_t
      type(c_ptr), value :: buf
      integer(c_size_t), value :: len
      integer(c_size_t) :: fh_last_error
    end function fh_last_error

    function fh_version() bind(C, name="fh_version")
      import :: c_int
      integer(c_int) :: fh_version
    end function fh_version

    function fh_version_check(major, minor, config_size) bind(C, name="fh_version_check")
      import :: c_int, c_size_t
      integer(c_int), value :: major
      integer(c_int), value :: minor
      integer(c_size_t), value :: config_size
      integer(c_int) :: fh_version_check
    end function fh_version_check

    ! ---- configuration and lifecycle ----
    subroutine fh_config_init(cfg) bind(C, name="fh_config_init")
      import :: c_ptr
      type(c_ptr), value :: cfg
    end subroutine fh_config_init

    function fh_init_comm_f(comm_f, cfg, ctx_out) bind(C, name="fh_init_comm_f")
      import :: c_int, c_ptr
      integer(c_int), value :: comm_f
      type(c_ptr), value :: cfg
      type(c_ptr), intent(out) :: ctx_out
      integer(c_int) :: fh_init_comm_f
    end function fh_init_comm_f

    function fh_init_world(cfg, ctx_out) bind(C, name="fh_init_world")
      import :: c_int, c_ptr
      type(c_ptr), value :: cfg
      type(c_ptr), intent(out) :: ctx_out
      integer(c_int) :: fh_init_world
    end function fh_init_world

    ! C's fh_reduce_fn (the Fortran name fh_reduce_fn is the callback's interface)
    function fh_reduce_fn_c(ctx, root, src, dst, count, elem_size, fn, user) &
        bind(C, name="fh_reduce_fn")
      import :: c_int, c_ptr, c_size_t, c_funptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: root
      type(c_ptr), value :: src
      type(c_ptr), value :: dst
      integer(c_size_t), value :: count
      integer(c_size_t), value :: elem_size
      type(c_funptr), value :: fn
      type(c_ptr), value :: user
      integer(c_int) :: fh_reduce_fn_c
    end function fh_reduce_fn_c

    function fh_allreduce_fn(ctx, src, dst, count, elem_size, fn, user) &
        bind(C, name="fh_allreduce_fn")
      import :: c_int, c_ptr, c_size_t, c_funptr
      type(c_ptr), value :: ctx
      type(c_ptr), value :: src
      type(c_ptr), value :: dst
      integer(c_size_t), value :: count
      integer(c_size_t), value :: elem_size
      type(c_funptr), value :: fn
      type(c_ptr), value :: user
      integer(c_int) :: fh_allreduce_fn
    end function fh_allreduce_fn

    function fh_word_lock(ctx, rank, word, flags, holder_out) bind(C, name="fh_word_lock")
      import :: c_int, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: word
      integer(c_int), value :: flags
      type(c_ptr), value :: holder_out
      integer(c_int) :: fh_word_lock
    end function fh_word_lock

    function fh_word_unlock(ctx, rank, word, holder_out) bind(C, name="fh_word_unlock")
      import :: c_int, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: word
      type(c_ptr), value :: holder_out
      integer(c_int) :: fh_word_unlock
    end function fh_word_unlock

    function fh_put_signal(ctx, rank, dst, src, nbytes, sig_addr, signal, sig_op) &
        bind(C, name="fh_put_signal")
      import :: c_int, c_ptr, c_size_t, c_int64_t
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: dst
      type(c_ptr), value :: src
      integer(c_size_t), value :: nbytes
      type(c_ptr), value :: sig_addr
      integer(c_int64_t), value :: signal
      integer(c_int), value :: sig_op
      integer(c_int) :: fh_put_signal
    end function fh_put_signal

    function fh_signal_wait_until(ctx, sig_addr, cmp, value, value_out) &
        bind(C, name="fh_signal_wait_until")
      import :: c_int, c_ptr, c_int64_t
      type(c_ptr), value :: ctx
      type(c_ptr), value :: sig_addr
      integer(c_int), value :: cmp
      integer(c_int64_t), value :: value
      type(c_ptr), value :: value_out
      integer(c_int) :: fh_signal_wait_until
    end function fh_signal_wait_until

    function fh_split(ctx, color, key, cfg, ctx_out) bind(C, name="fh_split")
      import :: c_int, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: color
      integer(c_int), value :: key
      type(c_ptr), value :: cfg
      type(c_ptr), intent(out) :: ctx_out
      integer(c_int) :: fh_split
    end function fh_split

    function fh_abort(ctx, code) bind(C, name="fh_abort")
      import :: c_int, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: code
      integer(c_int) :: fh_abort
    end function fh_abort

    function fh_finalize(ctx) bind(C, name="fh_finalize")
      import :: c_int, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int) :: fh_finalize
    end function fh_finalize

    function fh_rank(ctx) bind(C, name="fh_rank")
      import :: c_int, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int) :: fh_rank
    end function fh_rank

    function fh_size(ctx) bind(C, name="fh_size")
      import :: c_int, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int) :: fh_size
    end function fh_size

    function fh_poll(ctx) bind(C, name="fh_poll")
      import :: c_int, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int) :: fh_poll
    end function fh_poll

    ! Collective barrier that keeps serving active messages while waiting.
    function fh_barrier(ctx) bind(C, name="fh_barrier")
      import :: c_int, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int) :: fh_barrier
    end function fh_barrier

    function fh_config_print(ctx) bind(C, name="fh_config_print")
      import :: c_int, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int) :: fh_config_print
    end function fh_config_print

    ! ---- memory ----
    function fh_malloc(ctx, nbytes) bind(C, name="fh_malloc")
      import :: c_ptr, c_size_t
      type(c_ptr), value :: ctx
      integer(c_size_t), value :: nbytes
      type(c_ptr) :: fh_malloc
    end function fh_malloc

    subroutine fh_free(ctx, ptr) bind(C, name="fh_free")
      import :: c_ptr
      type(c_ptr), value :: ctx
      type(c_ptr), value :: ptr
    end subroutine fh_free

    function fh_mem_register(ctx, addr, len) bind(C, name="fh_mem_register")
      import :: c_int, c_ptr, c_size_t
      type(c_ptr), value :: ctx
      type(c_ptr), value :: addr
      integer(c_size_t), value :: len
      integer(c_int) :: fh_mem_register
    end function fh_mem_register

    function fh_mem_unregister(ctx, addr, len) bind(C, name="fh_mem_unregister")
      import :: c_int, c_ptr, c_size_t
      type(c_ptr), value :: ctx
      type(c_ptr), value :: addr
      integer(c_size_t), value :: len
      integer(c_int) :: fh_mem_unregister
    end function fh_mem_unregister

    function fh_mem_invalidate(ctx, addr, len) bind(C, name="fh_mem_invalidate")
      import :: c_int, c_ptr, c_size_t
      type(c_ptr), value :: ctx
      type(c_ptr), value :: addr
      integer(c_size_t), value :: len
      integer(c_int) :: fh_mem_invalidate
    end function fh_mem_invalidate

    ! ---- RMA ----
    function fh_put(ctx, rank, dst, src, nbytes) bind(C, name="fh_put")
      import :: c_int, c_ptr, c_size_t
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: dst
      type(c_ptr), value :: src
      integer(c_size_t), value :: nbytes
      integer(c_int) :: fh_put
    end function fh_put

    function fh_local_addr(ctx, rank, raddr, nbytes, local_out) &
        bind(C, name="fh_local_addr")
      import :: c_int, c_ptr, c_size_t
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: raddr
      integer(c_size_t), value :: nbytes
      type(c_ptr), intent(out) :: local_out
      integer(c_int) :: fh_local_addr
    end function fh_local_addr

    function fh_get(ctx, dst, rank, src, nbytes) bind(C, name="fh_get")
      import :: c_int, c_ptr, c_size_t
      type(c_ptr), value :: ctx
      type(c_ptr), value :: dst
      integer(c_int), value :: rank
      type(c_ptr), value :: src
      integer(c_size_t), value :: nbytes
      integer(c_int) :: fh_get
    end function fh_get

    function fh_put_nb(ctx, rank, dst, src, nbytes, h_out) bind(C, name="fh_put_nb")
      import :: c_int, c_int64_t, c_ptr, c_size_t
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: dst
      type(c_ptr), value :: src
      integer(c_size_t), value :: nbytes
      integer(c_int64_t), intent(out) :: h_out
      integer(c_int) :: fh_put_nb
    end function fh_put_nb

    function fh_get_nb(ctx, dst, rank, src, nbytes, h_out) bind(C, name="fh_get_nb")
      import :: c_int, c_int64_t, c_ptr, c_size_t
      type(c_ptr), value :: ctx
      type(c_ptr), value :: dst
      integer(c_int), value :: rank
      type(c_ptr), value :: src
      integer(c_size_t), value :: nbytes
      integer(c_int64_t), intent(out) :: h_out
      integer(c_int) :: fh_get_nb
    end function fh_get_nb

    function fh_put_nbi(ctx, rank, dst, src, nbytes) bind(C, name="fh_put_nbi")
      import :: c_int, c_ptr, c_size_t
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: dst
      type(c_ptr), value :: src
      integer(c_size_t), value :: nbytes
      integer(c_int) :: fh_put_nbi
    end function fh_put_nbi

    function fh_get_nbi(ctx, dst, rank, src, nbytes) bind(C, name="fh_get_nbi")
      import :: c_int, c_ptr, c_size_t
      type(c_ptr), value :: ctx
      type(c_ptr), value :: dst
      integer(c_int), value :: rank
      type(c_ptr), value :: src
      integer(c_size_t), value :: nbytes
      integer(c_int) :: fh_get_nbi
    end function fh_get_nbi

    function fh_test(ctx, h) bind(C, name="fh_test")
      import :: c_int, c_int64_t, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int64_t), value :: h
      integer(c_int) :: fh_test
    end function fh_test

    function fh_wait(ctx, h) bind(C, name="fh_wait")
      import :: c_int, c_int64_t, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int64_t), value :: h
      integer(c_int) :: fh_wait
    end function fh_wait

    function fh_wait_all(ctx, hs, n) bind(C, name="fh_wait_all")
      import :: c_int, c_int64_t, c_ptr, c_size_t
      type(c_ptr), value :: ctx
      integer(c_int64_t), intent(inout) :: hs(*)
      integer(c_size_t), value :: n
      integer(c_int) :: fh_wait_all
    end function fh_wait_all

    function fh_test_all(ctx, hs, n) bind(C, name="fh_test_all")
      import :: c_int, c_int64_t, c_ptr, c_size_t
      type(c_ptr), value :: ctx
      integer(c_int64_t), intent(inout) :: hs(*)
      integer(c_size_t), value :: n
      integer(c_int) :: fh_test_all
    end function fh_test_all

    function fh_wait_some(ctx, hs, n) bind(C, name="fh_wait_some")
      import :: c_int, c_int64_t, c_ptr, c_size_t
      type(c_ptr), value :: ctx
      integer(c_int64_t), intent(inout) :: hs(*)
      integer(c_size_t), value :: n
      integer(c_int) :: fh_wait_some
    end function fh_wait_some

    function fh_test_some(ctx, hs, n) bind(C, name="fh_test_some")
      import :: c_int, c_int64_t, c_ptr, c_size_t
      type(c_ptr), value :: ctx
      integer(c_int64_t), intent(inout) :: hs(*)
      integer(c_size_t), value :: n
      integer(c_int) :: fh_test_some
    end function fh_test_some

    function fh_wait_nbi(ctx, which) bind(C, name="fh_wait_nbi")
      import :: c_int, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: which
      integer(c_int) :: fh_wait_nbi
    end function fh_wait_nbi

    function fh_test_nbi(ctx, which) bind(C, name="fh_test_nbi")
      import :: c_int, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: which
      integer(c_int) :: fh_test_nbi
    end function fh_test_nbi

    ! ---- active messages ----
    function fh_am_register(ctx, index, fn, user) bind(C, name="fh_am_register")
      import :: c_int, c_ptr, c_funptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: index
      type(c_funptr), value :: fn
      type(c_ptr), value :: user
      integer(c_int) :: fh_am_register
    end function fh_am_register

    function fh_am_request_short(ctx, rank, index, args, nargs) bind(C, name="fh_am_request_short")
      import :: c_int, c_int64_t, c_ptr, c_size_t
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      integer(c_int), value :: index
      integer(c_int64_t), intent(in) :: args(*)
      integer(c_size_t), value :: nargs
      integer(c_int) :: fh_am_request_short
    end function fh_am_request_short

    function fh_am_request_medium(ctx, rank, index, buf, nbytes, args, nargs) &
        bind(C, name="fh_am_request_medium")
      import :: c_int, c_int64_t, c_ptr, c_size_t
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      integer(c_int), value :: index
      type(c_ptr), value :: buf
      integer(c_size_t), value :: nbytes
      integer(c_int64_t), intent(in) :: args(*)
      integer(c_size_t), value :: nargs
      integer(c_int) :: fh_am_request_medium
    end function fh_am_request_medium

    function fh_am_request_long(ctx, rank, index, buf, nbytes, dst, args, nargs) &
        bind(C, name="fh_am_request_long")
      import :: c_int, c_int64_t, c_ptr, c_size_t
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      integer(c_int), value :: index
      type(c_ptr), value :: buf
      integer(c_size_t), value :: nbytes
      type(c_ptr), value :: dst
      integer(c_int64_t), intent(in) :: args(*)
      integer(c_size_t), value :: nargs
      integer(c_int) :: fh_am_request_long
    end function fh_am_request_long

    function fh_am_reply_short(tok, index, args, nargs) bind(C, name="fh_am_reply_short")
      import :: c_int, c_int64_t, c_ptr, c_size_t
      type(c_ptr), value :: tok
      integer(c_int), value :: index
      integer(c_int64_t), intent(in) :: args(*)
      integer(c_size_t), value :: nargs
      integer(c_int) :: fh_am_reply_short
    end function fh_am_reply_short

    function fh_am_reply_medium(tok, index, buf, nbytes, args, nargs) bind(C, name="fh_am_reply_medium")
      import :: c_int, c_int64_t, c_ptr, c_size_t
      type(c_ptr), value :: tok
      integer(c_int), value :: index
      type(c_ptr), value :: buf
      integer(c_size_t), value :: nbytes
      integer(c_int64_t), intent(in) :: args(*)
      integer(c_size_t), value :: nargs
      integer(c_int) :: fh_am_reply_medium
    end function fh_am_reply_medium

    function fh_am_reply_long(tok, index, buf, nbytes, dst, args, nargs) bind(C, name="fh_am_reply_long")
      import :: c_int, c_int64_t, c_ptr, c_size_t
      type(c_ptr), value :: tok
      integer(c_int), value :: index
      type(c_ptr), value :: buf
      integer(c_size_t), value :: nbytes
      type(c_ptr), value :: dst
      integer(c_int64_t), intent(in) :: args(*)
      integer(c_size_t), value :: nargs
      integer(c_int) :: fh_am_reply_long
    end function fh_am_reply_long

    function fh_am_source(tok) bind(C, name="fh_am_source")
      import :: c_int, c_ptr
      type(c_ptr), value :: tok
      integer(c_int) :: fh_am_source
    end function fh_am_source

    function fh_am_max_args() bind(C, name="fh_am_max_args")
      import :: c_size_t
      integer(c_size_t) :: fh_am_max_args
    end function fh_am_max_args

    function fh_am_max_medium(ctx) bind(C, name="fh_am_max_medium")
      import :: c_ptr, c_size_t
      type(c_ptr), value :: ctx
      integer(c_size_t) :: fh_am_max_medium
    end function fh_am_max_medium

    function fh_am_max_long(ctx) bind(C, name="fh_am_max_long")
      import :: c_ptr, c_size_t
      type(c_ptr), value :: ctx
      integer(c_size_t) :: fh_am_max_long
    end function fh_am_max_long

    ! ---- remote atomics (T = u32, u64, i32, i64; the word is integer(c_int32_t) for
    ! u32/i32 and integer(c_int64_t) for u64/i64; pass its address as raddr) ----
    ! fetch&add: old_out gets the value before
    function fh_atomic_fetch_add_u32(ctx, rank, raddr, value, old_out) &
        bind(C, name="fh_atomic_fetch_add_u32")
      import :: c_int, c_int32_t, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: raddr
      integer(c_int32_t), value :: value
      integer(c_int32_t), intent(out) :: old_out
      integer(c_int) :: fh_atomic_fetch_add_u32
    end function fh_atomic_fetch_add_u32

    function fh_atomic_fetch_add_u32_nb(ctx, rank, raddr, value, old_out, h_out) &
        bind(C, name="fh_atomic_fetch_add_u32_nb")
      import :: c_int, c_int32_t, c_int64_t, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: raddr
      integer(c_int32_t), value :: value
      integer(c_int32_t), intent(out), asynchronous :: old_out
      integer(c_int64_t), intent(out) :: h_out
      integer(c_int) :: fh_atomic_fetch_add_u32_nb
    end function fh_atomic_fetch_add_u32_nb

    function fh_atomic_fetch_add_u64(ctx, rank, raddr, value, old_out) &
        bind(C, name="fh_atomic_fetch_add_u64")
      import :: c_int, c_int64_t, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: raddr
      integer(c_int64_t), value :: value
      integer(c_int64_t), intent(out) :: old_out
      integer(c_int) :: fh_atomic_fetch_add_u64
    end function fh_atomic_fetch_add_u64

    function fh_atomic_fetch_add_u64_nb(ctx, rank, raddr, value, old_out, h_out) &
        bind(C, name="fh_atomic_fetch_add_u64_nb")
      import :: c_int, c_int64_t, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: raddr
      integer(c_int64_t), value :: value
      integer(c_int64_t), intent(out), asynchronous :: old_out
      integer(c_int64_t), intent(out) :: h_out
      integer(c_int) :: fh_atomic_fetch_add_u64_nb
    end function fh_atomic_fetch_add_u64_nb

    function fh_atomic_fetch_add_i32(ctx, rank, raddr, value, old_out) &
        bind(C, name="fh_atomic_fetch_add_i32")
      import :: c_int, c_int32_t, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: raddr
      integer(c_int32_t), value :: value
      integer(c_int32_t), intent(out) :: old_out
      integer(c_int) :: fh_atomic_fetch_add_i32
    end function fh_atomic_fetch_add_i32

    function fh_atomic_fetch_add_i32_nb(ctx, rank, raddr, value, old_out, h_out) &
        bind(C, name="fh_atomic_fetch_add_i32_nb")
      import :: c_int, c_int32_t, c_int64_t, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: raddr
      integer(c_int32_t), value :: value
      integer(c_int32_t), intent(out), asynchronous :: old_out
      integer(c_int64_t), intent(out) :: h_out
      integer(c_int) :: fh_atomic_fetch_add_i32_nb
    end function fh_atomic_fetch_add_i32_nb

    function fh_atomic_fetch_add_i64(ctx, rank, raddr, value, old_out) &
        bind(C, name="fh_atomic_fetch_add_i64")
      import :: c_int, c_int64_t, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: raddr
      integer(c_int64_t), value :: value
      integer(c_int64_t), intent(out) :: old_out
      integer(c_int) :: fh_atomic_fetch_add_i64
    end function fh_atomic_fetch_add_i64

    function fh_atomic_fetch_add_i64_nb(ctx, rank, raddr, value, old_out, h_out) &
        bind(C, name="fh_atomic_fetch_add_i64_nb")
      import :: c_int, c_int64_t, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: raddr
      integer(c_int64_t), value :: value
      integer(c_int64_t), intent(out), asynchronous :: old_out
      integer(c_int64_t), intent(out) :: h_out
      integer(c_int) :: fh_atomic_fetch_add_i64_nb
    end function fh_atomic_fetch_add_i64_nb

    ! add (no result)
    function fh_atomic_add_u32(ctx, rank, raddr, value) bind(C, name="fh_atomic_add_u32")
      import :: c_int, c_int32_t, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: raddr
      integer(c_int32_t), value :: value
      integer(c_int) :: fh_atomic_add_u32
    end function fh_atomic_add_u32

    function fh_atomic_add_u32_nb(ctx, rank, raddr, value, h_out) bind(C, name="fh_atomic_add_u32_nb")
      import :: c_int, c_int32_t, c_int64_t, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: raddr
      integer(c_int32_t), value :: value
      integer(c_int64_t), intent(out) :: h_out
      integer(c_int) :: fh_atomic_add_u32_nb
    end function fh_atomic_add_u32_nb

    function fh_atomic_add_u64(ctx, rank, raddr, value) bind(C, name="fh_atomic_add_u64")
      import :: c_int, c_int64_t, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: raddr
      integer(c_int64_t), value :: value
      integer(c_int) :: fh_atomic_add_u64
    end function fh_atomic_add_u64

    function fh_atomic_add_u64_nb(ctx, rank, raddr, value, h_out) bind(C, name="fh_atomic_add_u64_nb")
      import :: c_int, c_int64_t, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: raddr
      integer(c_int64_t), value :: value
      integer(c_int64_t), intent(out) :: h_out
      integer(c_int) :: fh_atomic_add_u64_nb
    end function fh_atomic_add_u64_nb

    function fh_atomic_add_i32(ctx, rank, raddr, value) bind(C, name="fh_atomic_add_i32")
      import :: c_int, c_int32_t, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: raddr
      integer(c_int32_t), value :: value
      integer(c_int) :: fh_atomic_add_i32
    end function fh_atomic_add_i32

    function fh_atomic_add_i32_nb(ctx, rank, raddr, value, h_out) bind(C, name="fh_atomic_add_i32_nb")
      import :: c_int, c_int32_t, c_int64_t, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: raddr
      integer(c_int32_t), value :: value
      integer(c_int64_t), intent(out) :: h_out
      integer(c_int) :: fh_atomic_add_i32_nb
    end function fh_atomic_add_i32_nb

    function fh_atomic_add_i64(ctx, rank, raddr, value) bind(C, name="fh_atomic_add_i64")
      import :: c_int, c_int64_t, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: raddr
      integer(c_int64_t), value :: value
      integer(c_int) :: fh_atomic_add_i64
    end function fh_atomic_add_i64

    function fh_atomic_add_i64_nb(ctx, rank, raddr, value, h_out) bind(C, name="fh_atomic_add_i64_nb")
      import :: c_int, c_int64_t, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: raddr
      integer(c_int64_t), value :: value
      integer(c_int64_t), intent(out) :: h_out
      integer(c_int) :: fh_atomic_add_i64_nb
    end function fh_atomic_add_i64_nb

    ! fetch&write: old_out gets the value before
    function fh_atomic_swap_u32(ctx, rank, raddr, value, old_out) bind(C, name="fh_atomic_swap_u32")
      import :: c_int, c_int32_t, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: raddr
      integer(c_int32_t), value :: value
      integer(c_int32_t), intent(out) :: old_out
      integer(c_int) :: fh_atomic_swap_u32
    end function fh_atomic_swap_u32

    function fh_atomic_swap_u32_nb(ctx, rank, raddr, value, old_out, h_out) &
        bind(C, name="fh_atomic_swap_u32_nb")
      import :: c_int, c_int32_t, c_int64_t, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: raddr
      integer(c_int32_t), value :: value
      integer(c_int32_t), intent(out), asynchronous :: old_out
      integer(c_int64_t), intent(out) :: h_out
      integer(c_int) :: fh_atomic_swap_u32_nb
    end function fh_atomic_swap_u32_nb

    function fh_atomic_swap_u64(ctx, rank, raddr, value, old_out) bind(C, name="fh_atomic_swap_u64")
      import :: c_int, c_int64_t, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: raddr
      integer(c_int64_t), value :: value
      integer(c_int64_t), intent(out) :: old_out
      integer(c_int) :: fh_atomic_swap_u64
    end function fh_atomic_swap_u64

    function fh_atomic_swap_u64_nb(ctx, rank, raddr, value, old_out, h_out) &
        bind(C, name="fh_atomic_swap_u64_nb")
      import :: c_int, c_int64_t, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: raddr
      integer(c_int64_t), value :: value
      integer(c_int64_t), intent(out), asynchronous :: old_out
      integer(c_int64_t), intent(out) :: h_out
      integer(c_int) :: fh_atomic_swap_u64_nb
    end function fh_atomic_swap_u64_nb

    function fh_atomic_swap_i32(ctx, rank, raddr, value, old_out) bind(C, name="fh_atomic_swap_i32")
      import :: c_int, c_int32_t, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: raddr
      integer(c_int32_t), value :: value
      integer(c_int32_t), intent(out) :: old_out
      integer(c_int) :: fh_atomic_swap_i32
    end function fh_atomic_swap_i32

    function fh_atomic_swap_i32_nb(ctx, rank, raddr, value, old_out, h_out) &
        bind(C, name="fh_atomic_swap_i32_nb")
      import :: c_int, c_int32_t, c_int64_t, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: raddr
      integer(c_int32_t), value :: value
      integer(c_int32_t), intent(out), asynchronous :: old_out
      integer(c_int64_t), intent(out) :: h_out
      integer(c_int) :: fh_atomic_swap_i32_nb
    end function fh_atomic_swap_i32_nb

    function fh_atomic_swap_i64(ctx, rank, raddr, value, old_out) bind(C, name="fh_atomic_swap_i64")
      import :: c_int, c_int64_t, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: raddr
      integer(c_int64_t), value :: value
      integer(c_int64_t), intent(out) :: old_out
      integer(c_int) :: fh_atomic_swap_i64
    end function fh_atomic_swap_i64

    function fh_atomic_swap_i64_nb(ctx, rank, raddr, value, old_out, h_out) &
        bind(C, name="fh_atomic_swap_i64_nb")
      import :: c_int, c_int64_t, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: raddr
      integer(c_int64_t), value :: value
      integer(c_int64_t), intent(out), asynchronous :: old_out
      integer(c_int64_t), intent(out) :: h_out
      integer(c_int) :: fh_atomic_swap_i64_nb
    end function fh_atomic_swap_i64_nb

    ! compare&swap: old_out == expected exactly when it swapped
    function fh_atomic_cas_u32(ctx, rank, raddr, expected, desired, old_out) &
        bind(C, name="fh_atomic_cas_u32")
      import :: c_int, c_int32_t, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: raddr
      integer(c_int32_t), value :: expected
      integer(c_int32_t), value :: desired
      integer(c_int32_t), intent(out) :: old_out
      integer(c_int) :: fh_atomic_cas_u32
    end function fh_atomic_cas_u32

    function fh_atomic_cas_u32_nb(ctx, rank, raddr, expected, desired, old_out, h_out) &
        bind(C, name="fh_atomic_cas_u32_nb")
      import :: c_int, c_int32_t, c_int64_t, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: raddr
      integer(c_int32_t), value :: expected
      integer(c_int32_t), value :: desired
      integer(c_int32_t), intent(out), asynchronous :: old_out
      integer(c_int64_t), intent(out) :: h_out
      integer(c_int) :: fh_atomic_cas_u32_nb
    end function fh_atomic_cas_u32_nb

    function fh_atomic_cas_u64(ctx, rank, raddr, expected, desired, old_out) &
        bind(C, name="fh_atomic_cas_u64")
      import :: c_int, c_int64_t, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: raddr
      integer(c_int64_t), value :: expected
      integer(c_int64_t), value :: desired
      integer(c_int64_t), intent(out) :: old_out
      integer(c_int) :: fh_atomic_cas_u64
    end function fh_atomic_cas_u64

    function fh_atomic_cas_u64_nb(ctx, rank, raddr, expected, desired, old_out, h_out) &
        bind(C, name="fh_atomic_cas_u64_nb")
      import :: c_int, c_int64_t, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: raddr
      integer(c_int64_t), value :: expected
      integer(c_int64_t), value :: desired
      integer(c_int64_t), intent(out), asynchronous :: old_out
      integer(c_int64_t), intent(out) :: h_out
      integer(c_int) :: fh_atomic_cas_u64_nb
    end function fh_atomic_cas_u64_nb

    function fh_atomic_cas_i32(ctx, rank, raddr, expected, desired, old_out) &
        bind(C, name="fh_atomic_cas_i32")
      import :: c_int, c_int32_t, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: raddr
      integer(c_int32_t), value :: expected
      integer(c_int32_t), value :: desired
      integer(c_int32_t), intent(out) :: old_out
      integer(c_int) :: fh_atomic_cas_i32
    end function fh_atomic_cas_i32

    function fh_atomic_cas_i32_nb(ctx, rank, raddr, expected, desired, old_out, h_out) &
        bind(C, name="fh_atomic_cas_i32_nb")
      import :: c_int, c_int32_t, c_int64_t, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: raddr
      integer(c_int32_t), value :: expected
      integer(c_int32_t), value :: desired
      integer(c_int32_t), intent(out), asynchronous :: old_out
      integer(c_int64_t), intent(out) :: h_out
      integer(c_int) :: fh_atomic_cas_i32_nb
    end function fh_atomic_cas_i32_nb

    function fh_atomic_cas_i64(ctx, rank, raddr, expected, desired, old_out) &
        bind(C, name="fh_atomic_cas_i64")
      import :: c_int, c_int64_t, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: raddr
      integer(c_int64_t), value :: expected
      integer(c_int64_t), value :: desired
      integer(c_int64_t), intent(out) :: old_out
      integer(c_int) :: fh_atomic_cas_i64
    end function fh_atomic_cas_i64

    function fh_atomic_cas_i64_nb(ctx, rank, raddr, expected, desired, old_out, h_out) &
        bind(C, name="fh_atomic_cas_i64_nb")
      import :: c_int, c_int64_t, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: raddr
      integer(c_int64_t), value :: expected
      integer(c_int64_t), value :: desired
      integer(c_int64_t), intent(out), asynchronous :: old_out
      integer(c_int64_t), intent(out) :: h_out
      integer(c_int) :: fh_atomic_cas_i64_nb
    end function fh_atomic_cas_i64_nb

    ! atomic read
    function fh_atomic_fetch_u32(ctx, rank, raddr, value_out) bind(C, name="fh_atomic_fetch_u32")
      import :: c_int, c_int32_t, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: raddr
      integer(c_int32_t), intent(out) :: value_out
      integer(c_int) :: fh_atomic_fetch_u32
    end function fh_atomic_fetch_u32

    function fh_atomic_fetch_u32_nb(ctx, rank, raddr, value_out, h_out) &
        bind(C, name="fh_atomic_fetch_u32_nb")
      import :: c_int, c_int32_t, c_int64_t, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: raddr
      integer(c_int32_t), intent(out), asynchronous :: value_out
      integer(c_int64_t), intent(out) :: h_out
      integer(c_int) :: fh_atomic_fetch_u32_nb
    end function fh_atomic_fetch_u32_nb

    function fh_atomic_fetch_u64(ctx, rank, raddr, value_out) bind(C, name="fh_atomic_fetch_u64")
      import :: c_int, c_int64_t, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: raddr
      integer(c_int64_t), intent(out) :: value_out
      integer(c_int) :: fh_atomic_fetch_u64
    end function fh_atomic_fetch_u64

    function fh_atomic_fetch_u64_nb(ctx, rank, raddr, value_out, h_out) &
        bind(C, name="fh_atomic_fetch_u64_nb")
      import :: c_int, c_int64_t, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: raddr
      integer(c_int64_t), intent(out), asynchronous :: value_out
      integer(c_int64_t), intent(out) :: h_out
      integer(c_int) :: fh_atomic_fetch_u64_nb
    end function fh_atomic_fetch_u64_nb

    function fh_atomic_fetch_i32(ctx, rank, raddr, value_out) bind(C, name="fh_atomic_fetch_i32")
      import :: c_int, c_int32_t, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: raddr
      integer(c_int32_t), intent(out) :: value_out
      integer(c_int) :: fh_atomic_fetch_i32
    end function fh_atomic_fetch_i32

    function fh_atomic_fetch_i32_nb(ctx, rank, raddr, value_out, h_out) &
        bind(C, name="fh_atomic_fetch_i32_nb")
      import :: c_int, c_int32_t, c_int64_t, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: raddr
      integer(c_int32_t), intent(out), asynchronous :: value_out
      integer(c_int64_t), intent(out) :: h_out
      integer(c_int) :: fh_atomic_fetch_i32_nb
    end function fh_atomic_fetch_i32_nb

    function fh_atomic_fetch_i64(ctx, rank, raddr, value_out) bind(C, name="fh_atomic_fetch_i64")
      import :: c_int, c_int64_t, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: raddr
      integer(c_int64_t), intent(out) :: value_out
      integer(c_int) :: fh_atomic_fetch_i64
    end function fh_atomic_fetch_i64

    function fh_atomic_fetch_i64_nb(ctx, rank, raddr, value_out, h_out) &
        bind(C, name="fh_atomic_fetch_i64_nb")
      import :: c_int, c_int64_t, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: raddr
      integer(c_int64_t), intent(out), asynchronous :: value_out
      integer(c_int64_t), intent(out) :: h_out
      integer(c_int) :: fh_atomic_fetch_i64_nb
    end function fh_atomic_fetch_i64_nb

    ! atomic write
    function fh_atomic_set_u32(ctx, rank, raddr, value) bind(C, name="fh_atomic_set_u32")
      import :: c_int, c_int32_t, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: raddr
      integer(c_int32_t), value :: value
      integer(c_int) :: fh_atomic_set_u32
    end function fh_atomic_set_u32

    function fh_atomic_set_u32_nb(ctx, rank, raddr, value, h_out) bind(C, name="fh_atomic_set_u32_nb")
      import :: c_int, c_int32_t, c_int64_t, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: raddr
      integer(c_int32_t), value :: value
      integer(c_int64_t), intent(out) :: h_out
      integer(c_int) :: fh_atomic_set_u32_nb
    end function fh_atomic_set_u32_nb

    function fh_atomic_set_u64(ctx, rank, raddr, value) bind(C, name="fh_atomic_set_u64")
      import :: c_int, c_int64_t, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: raddr
      integer(c_int64_t), value :: value
      integer(c_int) :: fh_atomic_set_u64
    end function fh_atomic_set_u64

    function fh_atomic_set_u64_nb(ctx, rank, raddr, value, h_out) bind(C, name="fh_atomic_set_u64_nb")
      import :: c_int, c_int64_t, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: raddr
      integer(c_int64_t), value :: value
      integer(c_int64_t), intent(out) :: h_out
      integer(c_int) :: fh_atomic_set_u64_nb
    end function fh_atomic_set_u64_nb

    function fh_atomic_set_i32(ctx, rank, raddr, value) bind(C, name="fh_atomic_set_i32")
      import :: c_int, c_int32_t, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: raddr
      integer(c_int32_t), value :: value
      integer(c_int) :: fh_atomic_set_i32
    end function fh_atomic_set_i32

    function fh_atomic_set_i32_nb(ctx, rank, raddr, value, h_out) bind(C, name="fh_atomic_set_i32_nb")
      import :: c_int, c_int32_t, c_int64_t, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: raddr
      integer(c_int32_t), value :: value
      integer(c_int64_t), intent(out) :: h_out
      integer(c_int) :: fh_atomic_set_i32_nb
    end function fh_atomic_set_i32_nb

    function fh_atomic_set_i64(ctx, rank, raddr, value) bind(C, name="fh_atomic_set_i64")
      import :: c_int, c_int64_t, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: raddr
      integer(c_int64_t), value :: value
      integer(c_int) :: fh_atomic_set_i64
    end function fh_atomic_set_i64

    function fh_atomic_set_i64_nb(ctx, rank, raddr, value, h_out) bind(C, name="fh_atomic_set_i64_nb")
      import :: c_int, c_int64_t, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: raddr
      integer(c_int64_t), value :: value
      integer(c_int64_t), intent(out) :: h_out
      integer(c_int) :: fh_atomic_set_i64_nb
    end function fh_atomic_set_i64_nb

    ! fetch-and-AND
    function fh_atomic_fetch_and_u32(ctx, rank, raddr, value, old_out) &
        bind(C, name="fh_atomic_fetch_and_u32")
      import :: c_int, c_int32_t, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: raddr
      integer(c_int32_t), value :: value
      integer(c_int32_t), intent(out) :: old_out
      integer(c_int) :: fh_atomic_fetch_and_u32
    end function fh_atomic_fetch_and_u32

    function fh_atomic_fetch_and_u32_nb(ctx, rank, raddr, value, old_out, h_out) &
        bind(C, name="fh_atomic_fetch_and_u32_nb")
      import :: c_int, c_int32_t, c_int64_t, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: raddr
      integer(c_int32_t), value :: value
      integer(c_int32_t), intent(out), asynchronous :: old_out
      integer(c_int64_t), intent(out) :: h_out
      integer(c_int) :: fh_atomic_fetch_and_u32_nb
    end function fh_atomic_fetch_and_u32_nb

    function fh_atomic_fetch_and_u64(ctx, rank, raddr, value, old_out) &
        bind(C, name="fh_atomic_fetch_and_u64")
      import :: c_int, c_int64_t, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: raddr
      integer(c_int64_t), value :: value
      integer(c_int64_t), intent(out) :: old_out
      integer(c_int) :: fh_atomic_fetch_and_u64
    end function fh_atomic_fetch_and_u64

    function fh_atomic_fetch_and_u64_nb(ctx, rank, raddr, value, old_out, h_out) &
        bind(C, name="fh_atomic_fetch_and_u64_nb")
      import :: c_int, c_int64_t, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: raddr
      integer(c_int64_t), value :: value
      integer(c_int64_t), intent(out), asynchronous :: old_out
      integer(c_int64_t), intent(out) :: h_out
      integer(c_int) :: fh_atomic_fetch_and_u64_nb
    end function fh_atomic_fetch_and_u64_nb

    function fh_atomic_fetch_and_i32(ctx, rank, raddr, value, old_out) &
        bind(C, name="fh_atomic_fetch_and_i32")
      import :: c_int, c_int32_t, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: raddr
      integer(c_int32_t), value :: value
      integer(c_int32_t), intent(out) :: old_out
      integer(c_int) :: fh_atomic_fetch_and_i32
    end function fh_atomic_fetch_and_i32

    function fh_atomic_fetch_and_i32_nb(ctx, rank, raddr, value, old_out, h_out) &
        bind(C, name="fh_atomic_fetch_and_i32_nb")
      import :: c_int, c_int32_t, c_int64_t, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: raddr
      integer(c_int32_t), value :: value
      integer(c_int32_t), intent(out), asynchronous :: old_out
      integer(c_int64_t), intent(out) :: h_out
      integer(c_int) :: fh_atomic_fetch_and_i32_nb
    end function fh_atomic_fetch_and_i32_nb

    function fh_atomic_fetch_and_i64(ctx, rank, raddr, value, old_out) &
        bind(C, name="fh_atomic_fetch_and_i64")
      import :: c_int, c_int64_t, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: raddr
      integer(c_int64_t), value :: value
      integer(c_int64_t), intent(out) :: old_out
      integer(c_int) :: fh_atomic_fetch_and_i64
    end function fh_atomic_fetch_and_i64

    function fh_atomic_fetch_and_i64_nb(ctx, rank, raddr, value, old_out, h_out) &
        bind(C, name="fh_atomic_fetch_and_i64_nb")
      import :: c_int, c_int64_t, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: raddr
      integer(c_int64_t), value :: value
      integer(c_int64_t), intent(out), asynchronous :: old_out
      integer(c_int64_t), intent(out) :: h_out
      integer(c_int) :: fh_atomic_fetch_and_i64_nb
    end function fh_atomic_fetch_and_i64_nb

    ! fetch-and-OR
    function fh_atomic_fetch_or_u32(ctx, rank, raddr, value, old_out) &
        bind(C, name="fh_atomic_fetch_or_u32")
      import :: c_int, c_int32_t, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: raddr
      integer(c_int32_t), value :: value
      integer(c_int32_t), intent(out) :: old_out
      integer(c_int) :: fh_atomic_fetch_or_u32
    end function fh_atomic_fetch_or_u32

    function fh_atomic_fetch_or_u32_nb(ctx, rank, raddr, value, old_out, h_out) &
        bind(C, name="fh_atomic_fetch_or_u32_nb")
      import :: c_int, c_int32_t, c_int64_t, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: raddr
      integer(c_int32_t), value :: value
      integer(c_int32_t), intent(out), asynchronous :: old_out
      integer(c_int64_t), intent(out) :: h_out
      integer(c_int) :: fh_atomic_fetch_or_u32_nb
    end function fh_atomic_fetch_or_u32_nb

    function fh_atomic_fetch_or_u64(ctx, rank, raddr, value, old_out) &
        bind(C, name="fh_atomic_fetch_or_u64")
      import :: c_int, c_int64_t, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: raddr
      integer(c_int64_t), value :: value
      integer(c_int64_t), intent(out) :: old_out
      integer(c_int) :: fh_atomic_fetch_or_u64
    end function fh_atomic_fetch_or_u64

    function fh_atomic_fetch_or_u64_nb(ctx, rank, raddr, value, old_out, h_out) &
        bind(C, name="fh_atomic_fetch_or_u64_nb")
      import :: c_int, c_int64_t, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: raddr
      integer(c_int64_t), value :: value
      integer(c_int64_t), intent(out), asynchronous :: old_out
      integer(c_int64_t), intent(out) :: h_out
      integer(c_int) :: fh_atomic_fetch_or_u64_nb
    end function fh_atomic_fetch_or_u64_nb

    function fh_atomic_fetch_or_i32(ctx, rank, raddr, value, old_out) &
        bind(C, name="fh_atomic_fetch_or_i32")
      import :: c_int, c_int32_t, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: raddr
      integer(c_int32_t), value :: value
      integer(c_int32_t), intent(out) :: old_out
      integer(c_int) :: fh_atomic_fetch_or_i32
    end function fh_atomic_fetch_or_i32

    function fh_atomic_fetch_or_i32_nb(ctx, rank, raddr, value, old_out, h_out) &
        bind(C, name="fh_atomic_fetch_or_i32_nb")
      import :: c_int, c_int32_t, c_int64_t, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: raddr
      integer(c_int32_t), value :: value
      integer(c_int32_t), intent(out), asynchronous :: old_out
      integer(c_int64_t), intent(out) :: h_out
      integer(c_int) :: fh_atomic_fetch_or_i32_nb
    end function fh_atomic_fetch_or_i32_nb

    function fh_atomic_fetch_or_i64(ctx, rank, raddr, value, old_out) &
        bind(C, name="fh_atomic_fetch_or_i64")
      import :: c_int, c_int64_t, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: raddr
      integer(c_int64_t), value :: value
      integer(c_int64_t), intent(out) :: old_out
      integer(c_int) :: fh_atomic_fetch_or_i64
    end function fh_atomic_fetch_or_i64

    function fh_atomic_fetch_or_i64_nb(ctx, rank, raddr, value, old_out, h_out) &
        bind(C, name="fh_atomic_fetch_or_i64_nb")
      import :: c_int, c_int64_t, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: raddr
      integer(c_int64_t), value :: value
      integer(c_int64_t), intent(out), asynchronous :: old_out
      integer(c_int64_t), intent(out) :: h_out
      integer(c_int) :: fh_atomic_fetch_or_i64_nb
    end function fh_atomic_fetch_or_i64_nb

    ! fetch-and-XOR
    function fh_atomic_fetch_xor_u32(ctx, rank, raddr, value, old_out) &
        bind(C, name="fh_atomic_fetch_xor_u32")
      import :: c_int, c_int32_t, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: raddr
      integer(c_int32_t), value :: value
      integer(c_int32_t), intent(out) :: old_out
      integer(c_int) :: fh_atomic_fetch_xor_u32
    end function fh_atomic_fetch_xor_u32

    function fh_atomic_fetch_xor_u32_nb(ctx, rank, raddr, value, old_out, h_out) &
        bind(C, name="fh_atomic_fetch_xor_u32_nb")
      import :: c_int, c_int32_t, c_int64_t, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: raddr
      integer(c_int32_t), value :: value
      integer(c_int32_t), intent(out), asynchronous :: old_out
      integer(c_int64_t), intent(out) :: h_out
      integer(c_int) :: fh_atomic_fetch_xor_u32_nb
    end function fh_atomic_fetch_xor_u32_nb

    function fh_atomic_fetch_xor_u64(ctx, rank, raddr, value, old_out) &
        bind(C, name="fh_atomic_fetch_xor_u64")
      import :: c_int, c_int64_t, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: raddr
      integer(c_int64_t), value :: value
      integer(c_int64_t), intent(out) :: old_out
      integer(c_int) :: fh_atomic_fetch_xor_u64
    end function fh_atomic_fetch_xor_u64

    function fh_atomic_fetch_xor_u64_nb(ctx, rank, raddr, value, old_out, h_out) &
        bind(C, name="fh_atomic_fetch_xor_u64_nb")
      import :: c_int, c_int64_t, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: raddr
      integer(c_int64_t), value :: value
      integer(c_int64_t), intent(out), asynchronous :: old_out
      integer(c_int64_t), intent(out) :: h_out
      integer(c_int) :: fh_atomic_fetch_xor_u64_nb
    end function fh_atomic_fetch_xor_u64_nb

    function fh_atomic_fetch_xor_i32(ctx, rank, raddr, value, old_out) &
        bind(C, name="fh_atomic_fetch_xor_i32")
      import :: c_int, c_int32_t, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: raddr
      integer(c_int32_t), value :: value
      integer(c_int32_t), intent(out) :: old_out
      integer(c_int) :: fh_atomic_fetch_xor_i32
    end function fh_atomic_fetch_xor_i32

    function fh_atomic_fetch_xor_i32_nb(ctx, rank, raddr, value, old_out, h_out) &
        bind(C, name="fh_atomic_fetch_xor_i32_nb")
      import :: c_int, c_int32_t, c_int64_t, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: raddr
      integer(c_int32_t), value :: value
      integer(c_int32_t), intent(out), asynchronous :: old_out
      integer(c_int64_t), intent(out) :: h_out
      integer(c_int) :: fh_atomic_fetch_xor_i32_nb
    end function fh_atomic_fetch_xor_i32_nb

    function fh_atomic_fetch_xor_i64(ctx, rank, raddr, value, old_out) &
        bind(C, name="fh_atomic_fetch_xor_i64")
      import :: c_int, c_int64_t, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: raddr
      integer(c_int64_t), value :: value
      integer(c_int64_t), intent(out) :: old_out
      integer(c_int) :: fh_atomic_fetch_xor_i64
    end function fh_atomic_fetch_xor_i64

    function fh_atomic_fetch_xor_i64_nb(ctx, rank, raddr, value, old_out, h_out) &
        bind(C, name="fh_atomic_fetch_xor_i64_nb")
      import :: c_int, c_int64_t, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: raddr
      integer(c_int64_t), value :: value
      integer(c_int64_t), intent(out), asynchronous :: old_out
      integer(c_int64_t), intent(out) :: h_out
      integer(c_int) :: fh_atomic_fetch_xor_i64_nb
    end function fh_atomic_fetch_xor_i64_nb


    ! ---- firehose: explicit pins and statistics ----
    function fh_local_pin(ctx, addr, len, pin_out) bind(C, name="fh_local_pin")
      import :: c_int, c_ptr, c_size_t
      type(c_ptr), value :: ctx
      type(c_ptr), value :: addr
      integer(c_size_t), value :: len
      type(c_ptr), intent(out) :: pin_out
      integer(c_int) :: fh_local_pin
    end function fh_local_pin

    function fh_try_local_pin(ctx, addr, len, pin_out) bind(C, name="fh_try_local_pin")
      import :: c_int, c_ptr, c_size_t
      type(c_ptr), value :: ctx
      type(c_ptr), value :: addr
      integer(c_size_t), value :: len
      type(c_ptr), intent(out) :: pin_out
      integer(c_int) :: fh_try_local_pin
    end function fh_try_local_pin

    function fh_partial_local_pin(ctx, addr, len, pin_out) bind(C, name="fh_partial_local_pin")
      import :: c_int, c_ptr, c_size_t
      type(c_ptr), value :: ctx
      type(c_ptr), value :: addr
      integer(c_size_t), value :: len
      type(c_ptr), intent(out) :: pin_out
      integer(c_int) :: fh_partial_local_pin
    end function fh_partial_local_pin

    function fh_remote_pin(ctx, rank, raddr, len, flags, cb, arg, pin_out) bind(C, name="fh_remote_pin")
      import :: c_int, c_ptr, c_size_t, c_funptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: raddr
      integer(c_size_t), value :: len
      integer(c_int), value :: flags
      type(c_funptr), value :: cb
      type(c_ptr), value :: arg
      type(c_ptr), intent(out) :: pin_out
      integer(c_int) :: fh_remote_pin
    end function fh_remote_pin

    function fh_try_remote_pin(ctx, rank, raddr, len, pin_out) bind(C, name="fh_try_remote_pin")
      import :: c_int, c_ptr, c_size_t
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: raddr
      integer(c_size_t), value :: len
      type(c_ptr), intent(out) :: pin_out
      integer(c_int) :: fh_try_remote_pin
    end function fh_try_remote_pin

    function fh_partial_remote_pin(ctx, rank, raddr, len, pin_out) bind(C, name="fh_partial_remote_pin")
      import :: c_int, c_ptr, c_size_t
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: raddr
      integer(c_size_t), value :: len
      type(c_ptr), intent(out) :: pin_out
      integer(c_int) :: fh_partial_remote_pin
    end function fh_partial_remote_pin

    function fh_pin_bounds(pin, addr_out, len_out) bind(C, name="fh_pin_bounds")
      import :: c_int, c_ptr, c_size_t
      type(c_ptr), value :: pin
      type(c_ptr), intent(out) :: addr_out
      integer(c_size_t), intent(out) :: len_out
      integer(c_int) :: fh_pin_bounds
    end function fh_pin_bounds

    function fh_release(ctx, pin) bind(C, name="fh_release")
      import :: c_int, c_ptr
      type(c_ptr), value :: ctx
      type(c_ptr), value :: pin
      integer(c_int) :: fh_release
    end function fh_release

    function fh_stats_get(ctx, out) bind(C, name="fh_stats_get")
      import :: c_int, c_ptr
      type(c_ptr), value :: ctx
      type(c_ptr), value :: out
      integer(c_int) :: fh_stats_get
    end function fh_stats_get

    function fh_stats_reset(ctx) bind(C, name="fh_stats_reset")
      import :: c_int, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int) :: fh_stats_reset
    end function fh_stats_reset

    function fh_stats_thread_get(out) bind(C, name="fh_stats_thread_get")
      import :: c_int, c_ptr
      type(c_ptr), value :: out
      integer(c_int) :: fh_stats_thread_get
    end function fh_stats_thread_get

    function fh_stats_thread_reset() bind(C, name="fh_stats_thread_reset")
      import :: c_int
      integer(c_int) :: fh_stats_thread_reset
    end function fh_stats_thread_reset

    ! ---- rpipe: one-sided pipes between two ranks ----
    function rpipe_open(ctx, peer, role, width_bytes, mode, policy, pipe_out) bind(C, name="rpipe_open")
      import :: c_int, c_ptr, c_size_t
      type(c_ptr), value :: ctx
      integer(c_int), value :: peer
      integer(c_int), value :: role
      integer(c_size_t), value :: width_bytes
      integer(c_int), value :: mode
      integer(c_int), value :: policy
      type(c_ptr), intent(out) :: pipe_out
      integer(c_int) :: rpipe_open
    end function rpipe_open

    function rpipe_rmalloc(p, nbytes, addr_out) bind(C, name="rpipe_rmalloc")
      import :: c_int, c_int64_t, c_ptr, c_size_t
      type(c_ptr), value :: p
      integer(c_size_t), value :: nbytes
      integer(c_int64_t), intent(out) :: addr_out
      integer(c_int) :: rpipe_rmalloc
    end function rpipe_rmalloc

    function rpipe_try_rmalloc(p, nbytes, addr_out) bind(C, name="rpipe_try_rmalloc")
      import :: c_int, c_int64_t, c_ptr, c_size_t
      type(c_ptr), value :: p
      integer(c_size_t), value :: nbytes
      integer(c_int64_t), intent(out) :: addr_out
      integer(c_int) :: rpipe_try_rmalloc
    end function rpipe_try_rmalloc

    function rpipe_rmem(p, addr) bind(C, name="rpipe_rmem")
      import :: c_int64_t, c_ptr
      type(c_ptr), value :: p
      integer(c_int64_t), value :: addr
      type(c_ptr) :: rpipe_rmem
    end function rpipe_rmem

    function rpipe_rwrite(p, addr) bind(C, name="rpipe_rwrite")
      import :: c_int, c_int64_t, c_ptr
      type(c_ptr), value :: p
      integer(c_int64_t), value :: addr
      integer(c_int) :: rpipe_rwrite
    end function rpipe_rwrite

    function rpipe_rread(p, addr_out, len_out) bind(C, name="rpipe_rread")
      import :: c_int, c_int64_t, c_ptr, c_size_t
      type(c_ptr), value :: p
      integer(c_int64_t), intent(out) :: addr_out
      integer(c_size_t), intent(out) :: len_out
      integer(c_int) :: rpipe_rread
    end function rpipe_rread

    function rpipe_try_rread(p, addr_out, len_out) bind(C, name="rpipe_try_rread")
      import :: c_int, c_int64_t, c_ptr, c_size_t
      type(c_ptr), value :: p
      integer(c_int64_t), intent(out) :: addr_out
      integer(c_size_t), intent(out) :: len_out
      integer(c_int) :: rpipe_try_rread
    end function rpipe_try_rread

    function rpipe_rfree(p, addr) bind(C, name="rpipe_rfree")
      import :: c_int, c_int64_t, c_ptr
      type(c_ptr), value :: p
      integer(c_int64_t), value :: addr
      integer(c_int) :: rpipe_rfree
    end function rpipe_rfree

    function rpipe_stats(p, stats_out) bind(C, name="rpipe_stats")
      import :: c_int, c_ptr
      type(c_ptr), value :: p
      type(c_ptr), value :: stats_out
      integer(c_int) :: rpipe_stats
    end function rpipe_stats

    function rpipe_close(p) bind(C, name="rpipe_close")
      import :: c_int, c_ptr
      type(c_ptr), value :: p
      integer(c_int) :: rpipe_close
    end function rpipe_close

    ! ---- distributed MCS queue lock (fh_lock_t * is type(c_ptr)) ----
    function fh_lock_create(ctx, home_rank, lock_out) bind(C, name="fh_lock_create")
      import :: c_int, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: home_rank
      type(c_ptr), intent(out) :: lock_out
      integer(c_int) :: fh_lock_create
    end function fh_lock_create

    function fh_lock_acquire(lock) bind(C, name="fh_lock_acquire")
      import :: c_int, c_ptr
      type(c_ptr), value :: lock
      integer(c_int) :: fh_lock_acquire
    end function fh_lock_acquire

    ! FH_OK or FH_NOT_READY (held or queued for).
    function fh_lock_try(lock) bind(C, name="fh_lock_try")
      import :: c_int, c_ptr
      type(c_ptr), value :: lock
      integer(c_int) :: fh_lock_try
    end function fh_lock_try

    function fh_lock_release(lock) bind(C, name="fh_lock_release")
      import :: c_int, c_ptr
      type(c_ptr), value :: lock
      integer(c_int) :: fh_lock_release
    end function fh_lock_release

    function fh_lock_destroy(lock) bind(C, name="fh_lock_destroy")
      import :: c_int, c_ptr
      type(c_ptr), value :: lock
      integer(c_int) :: fh_lock_destroy
    end function fh_lock_destroy

    ! ---- split-phase barrier (flags: 0 for a named id, or FH_BARRIER_ANONYMOUS) ----
    function fh_barrier_notify(ctx, id, flags) bind(C, name="fh_barrier_notify")
      import :: c_int, c_int64_t, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int64_t), value :: id
      integer(c_int), value :: flags
      integer(c_int) :: fh_barrier_notify
    end function fh_barrier_notify

    function fh_barrier_wait(ctx, id, flags) bind(C, name="fh_barrier_wait")
      import :: c_int, c_int64_t, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int64_t), value :: id
      integer(c_int), value :: flags
      integer(c_int) :: fh_barrier_wait
    end function fh_barrier_wait

    ! FH_OK (complete), FH_NOT_READY (call again) or an error as for fh_barrier_wait.
    function fh_barrier_try(ctx, id, flags) bind(C, name="fh_barrier_try")
      import :: c_int, c_int64_t, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int64_t), value :: id
      integer(c_int), value :: flags
      integer(c_int) :: fh_barrier_try
    end function fh_barrier_try

    ! ---- collectives (buffers by c_loc; dt: FH_INT32 .. FH_CDOUBLE, op: FH_SUM .. FH_LOR) ----
    function fh_broadcast(ctx, root, buf, nbytes) bind(C, name="fh_broadcast")
      import :: c_int, c_ptr, c_size_t
      type(c_ptr), value :: ctx
      integer(c_int), value :: root
      type(c_ptr), value :: buf
      integer(c_size_t), value :: nbytes
      integer(c_int) :: fh_broadcast
    end function fh_broadcast

    ! dst is used at root only (c_null_ptr elsewhere is fine).
    function fh_reduce(ctx, root, src, dst, count, dt, op) bind(C, name="fh_reduce")
      import :: c_int, c_ptr, c_size_t
      type(c_ptr), value :: ctx
      integer(c_int), value :: root
      type(c_ptr), value :: src
      type(c_ptr), value :: dst
      integer(c_size_t), value :: count
      integer(c_int), value :: dt
      integer(c_int), value :: op
      integer(c_int) :: fh_reduce
    end function fh_reduce

    function fh_allreduce(ctx, src, dst, count, dt, op) bind(C, name="fh_allreduce")
      import :: c_int, c_ptr, c_size_t
      type(c_ptr), value :: ctx
      type(c_ptr), value :: src
      type(c_ptr), value :: dst
      integer(c_size_t), value :: count
      integer(c_int), value :: dt
      integer(c_int), value :: op
      integer(c_int) :: fh_allreduce
    end function fh_allreduce

    ! dst holds nbytes * fh_size(ctx) bytes; rank i's bytes land at offset i * nbytes.
    function fh_allgather(ctx, src, nbytes, dst) bind(C, name="fh_allgather")
      import :: c_int, c_ptr, c_size_t
      type(c_ptr), value :: ctx
      type(c_ptr), value :: src
      integer(c_size_t), value :: nbytes
      type(c_ptr), value :: dst
      integer(c_int) :: fh_allgather
    end function fh_allgather

    ! Non-contiguous RMA (seed 002 VIS): vector, indexed and strided put and get;
    ! each also _nb (h_out) and _nbi. Lists are arrays; strides and counts in bytes.

    function fh_putv(ctx, rank, dstcount, dstlist, srccount, srclist) bind(C, name="fh_putv")
      import :: c_int, c_ptr, c_size_t, fh_memvec_t
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      integer(c_size_t), value :: dstcount
      type(fh_memvec_t), intent(in) :: dstlist(*)
      integer(c_size_t), value :: srccount
      type(fh_memvec_t), intent(in) :: srclist(*)
      integer(c_int) :: fh_putv
    end function fh_putv

    function fh_putv_nb(ctx, rank, dstcount, dstlist, srccount, srclist, h_out) bind(C, name="fh_putv_nb")
      import :: c_int, c_int64_t, c_ptr, c_size_t, fh_memvec_t
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      integer(c_size_t), value :: dstcount
      type(fh_memvec_t), intent(in) :: dstlist(*)
      integer(c_size_t), value :: srccount
      type(fh_memvec_t), intent(in) :: srclist(*)
      integer(c_int64_t), intent(out) :: h_out
      integer(c_int) :: fh_putv_nb
    end function fh_putv_nb

    function fh_putv_nbi(ctx, rank, dstcount, dstlist, srccount, srclist) bind(C, name="fh_putv_nbi")
      import :: c_int, c_ptr, c_size_t, fh_memvec_t
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      integer(c_size_t), value :: dstcount
      type(fh_memvec_t), intent(in) :: dstlist(*)
      integer(c_size_t), value :: srccount
      type(fh_memvec_t), intent(in) :: srclist(*)
      integer(c_int) :: fh_putv_nbi
    end function fh_putv_nbi

    function fh_getv(ctx, dstcount, dstlist, rank, srccount, srclist) bind(C, name="fh_getv")
      import :: c_int, c_ptr, c_size_t, fh_memvec_t
      type(c_ptr), value :: ctx
      integer(c_size_t), value :: dstcount
      type(fh_memvec_t), intent(in) :: dstlist(*)
      integer(c_int), value :: rank
      integer(c_size_t), value :: srccount
      type(fh_memvec_t), intent(in) :: srclist(*)
      integer(c_int) :: fh_getv
    end function fh_getv

    function fh_getv_nb(ctx, dstcount, dstlist, rank, srccount, srclist, h_out) bind(C, name="fh_getv_nb")
      import :: c_int, c_int64_t, c_ptr, c_size_t, fh_memvec_t
      type(c_ptr), value :: ctx
      integer(c_size_t), value :: dstcount
      type(fh_memvec_t), intent(in) :: dstlist(*)
      integer(c_int), value :: rank
      integer(c_size_t), value :: srccount
      type(fh_memvec_t), intent(in) :: srclist(*)
      integer(c_int64_t), intent(out) :: h_out
      integer(c_int) :: fh_getv_nb
    end function fh_getv_nb

    function fh_getv_nbi(ctx, dstcount, dstlist, rank, srccount, srclist) bind(C, name="fh_getv_nbi")
      import :: c_int, c_ptr, c_size_t, fh_memvec_t
      type(c_ptr), value :: ctx
      integer(c_size_t), value :: dstcount
      type(fh_memvec_t), intent(in) :: dstlist(*)
      integer(c_int), value :: rank
      integer(c_size_t), value :: srccount
      type(fh_memvec_t), intent(in) :: srclist(*)
      integer(c_int) :: fh_getv_nbi
    end function fh_getv_nbi

    function fh_puti(ctx, rank, dstcount, dstlist, dstlen, srccount, srclist, srclen) bind(C, name="fh_puti")
      import :: c_int, c_ptr, c_size_t
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      integer(c_size_t), value :: dstcount
      type(c_ptr), intent(in) :: dstlist(*)
      integer(c_size_t), value :: dstlen
      integer(c_size_t), value :: srccount
      type(c_ptr), intent(in) :: srclist(*)
      integer(c_size_t), value :: srclen
      integer(c_int) :: fh_puti
    end function fh_puti

    function fh_puti_nb(ctx, rank, dstcount, dstlist, dstlen, srccount, srclist, srclen, h_out) bind(C, name="fh_puti_nb")
      import :: c_int, c_int64_t, c_ptr, c_size_t
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      integer(c_size_t), value :: dstcount
      type(c_ptr), intent(in) :: dstlist(*)
      integer(c_size_t), value :: dstlen
      integer(c_size_t), value :: srccount
      type(c_ptr), intent(in) :: srclist(*)
      integer(c_size_t), value :: srclen
      integer(c_int64_t), intent(out) :: h_out
      integer(c_int) :: fh_puti_nb
    end function fh_puti_nb

    function fh_puti_nbi(ctx, rank, dstcount, dstlist, dstlen, srccount, srclist, srclen) bind(C, name="fh_puti_nbi")
      import :: c_int, c_ptr, c_size_t
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      integer(c_size_t), value :: dstcount
      type(c_ptr), intent(in) :: dstlist(*)
      integer(c_size_t), value :: dstlen
      integer(c_size_t), value :: srccount
      type(c_ptr), intent(in) :: srclist(*)
      integer(c_size_t), value :: srclen
      integer(c_int) :: fh_puti_nbi
    end function fh_puti_nbi

    function fh_geti(ctx, dstcount, dstlist, dstlen, rank, srccount, srclist, srclen) bind(C, name="fh_geti")
      import :: c_int, c_ptr, c_size_t
      type(c_ptr), value :: ctx
      integer(c_size_t), value :: dstcount
      type(c_ptr), intent(in) :: dstlist(*)
      integer(c_size_t), value :: dstlen
      integer(c_int), value :: rank
      integer(c_size_t), value :: srccount
      type(c_ptr), intent(in) :: srclist(*)
      integer(c_size_t), value :: srclen
      integer(c_int) :: fh_geti
    end function fh_geti

    function fh_geti_nb(ctx, dstcount, dstlist, dstlen, rank, srccount, srclist, srclen, h_out) bind(C, name="fh_geti_nb")
      import :: c_int, c_int64_t, c_ptr, c_size_t
      type(c_ptr), value :: ctx
      integer(c_size_t), value :: dstcount
      type(c_ptr), intent(in) :: dstlist(*)
      integer(c_size_t), value :: dstlen
      integer(c_int), value :: rank
      integer(c_size_t), value :: srccount
      type(c_ptr), intent(in) :: srclist(*)
      integer(c_size_t), value :: srclen
      integer(c_int64_t), intent(out) :: h_out
      integer(c_int) :: fh_geti_nb
    end function fh_geti_nb

    function fh_geti_nbi(ctx, dstcount, dstlist, dstlen, rank, srccount, srclist, srclen) bind(C, name="fh_geti_nbi")
      import :: c_int, c_ptr, c_size_t
      type(c_ptr), value :: ctx
      integer(c_size_t), value :: dstcount
      type(c_ptr), intent(in) :: dstlist(*)
      integer(c_size_t), value :: dstlen
      integer(c_int), value :: rank
      integer(c_size_t), value :: srccount
      type(c_ptr), intent(in) :: srclist(*)
      integer(c_size_t), value :: srclen
      integer(c_int) :: fh_geti_nbi
    end function fh_geti_nbi

    function fh_puts(ctx, rank, dstaddr, dststrides, srcaddr, srcstrides, count, stridelevels) bind(C, name="fh_puts")
      import :: c_int, c_ptr, c_size_t
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: dstaddr
      integer(c_size_t), intent(in) :: dststrides(*)
      type(c_ptr), value :: srcaddr
      integer(c_size_t), intent(in) :: srcstrides(*)
      integer(c_size_t), intent(in) :: count(*)
      integer(c_size_t), value :: stridelevels
      integer(c_int) :: fh_puts
    end function fh_puts

    function fh_puts_nb(ctx, rank, dstaddr, dststrides, srcaddr, srcstrides, count, stridelevels, h_out) bind(C, name="fh_puts_nb")
      import :: c_int, c_int64_t, c_ptr, c_size_t
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: dstaddr
      integer(c_size_t), intent(in) :: dststrides(*)
      type(c_ptr), value :: srcaddr
      integer(c_size_t), intent(in) :: srcstrides(*)
      integer(c_size_t), intent(in) :: count(*)
      integer(c_size_t), value :: stridelevels
      integer(c_int64_t), intent(out) :: h_out
      integer(c_int) :: fh_puts_nb
    end function fh_puts_nb

    function fh_puts_nbi(ctx, rank, dstaddr, dststrides, srcaddr, srcstrides, count, stridelevels) bind(C, name="fh_puts_nbi")
      import :: c_int, c_ptr, c_size_t
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: dstaddr
      integer(c_size_t), intent(in) :: dststrides(*)
      type(c_ptr), value :: srcaddr
      integer(c_size_t), intent(in) :: srcstrides(*)
      integer(c_size_t), intent(in) :: count(*)
      integer(c_size_t), value :: stridelevels
      integer(c_int) :: fh_puts_nbi
    end function fh_puts_nbi

    function fh_gets(ctx, dstaddr, dststrides, rank, srcaddr, srcstrides, count, stridelevels) bind(C, name="fh_gets")
      import :: c_int, c_ptr, c_size_t
      type(c_ptr), value :: ctx
      type(c_ptr), value :: dstaddr
      integer(c_size_t), intent(in) :: dststrides(*)
      integer(c_int), value :: rank
      type(c_ptr), value :: srcaddr
      integer(c_size_t), intent(in) :: srcstrides(*)
      integer(c_size_t), intent(in) :: count(*)
      integer(c_size_t), value :: stridelevels
      integer(c_int) :: fh_gets
    end function fh_gets

    function fh_gets_nb(ctx, dstaddr, dststrides, rank, srcaddr, srcstrides, count, stridelevels, h_out) bind(C, name="fh_gets_nb")
      import :: c_int, c_int64_t, c_ptr, c_size_t
      type(c_ptr), value :: ctx
      type(c_ptr), value :: dstaddr
      integer(c_size_t), intent(in) :: dststrides(*)
      integer(c_int), value :: rank
      type(c_ptr), value :: srcaddr
      integer(c_size_t), intent(in) :: srcstrides(*)
      integer(c_size_t), intent(in) :: count(*)
      integer(c_size_t), value :: stridelevels
      integer(c_int64_t), intent(out) :: h_out
      integer(c_int) :: fh_gets_nb
    end function fh_gets_nb

    function fh_gets_nbi(ctx, dstaddr, dststrides, rank, srcaddr, srcstrides, count, stridelevels) bind(C, name="fh_gets_nbi")
      import :: c_int, c_ptr, c_size_t
      type(c_ptr), value :: ctx
      type(c_ptr), value :: dstaddr
      integer(c_size_t), intent(in) :: dststrides(*)
      integer(c_int), value :: rank
      type(c_ptr), value :: srcaddr
      integer(c_size_t), intent(in) :: srcstrides(*)
      integer(c_size_t), intent(in) :: count(*)
      integer(c_size_t), value :: stridelevels
      integer(c_int) :: fh_gets_nbi
    end function fh_gets_nbi

    ! ---- value forms, memset, access regions, handler-safe locks ----
    ! Value forms: nbytes 1, 2, 4 or 8; the low 8*nbytes bits of value are written.
    function fh_put_val(ctx, rank, dst, value, nbytes) bind(C, name="fh_put_val")
      import :: c_int, c_int64_t, c_ptr, c_size_t
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: dst
      integer(c_int64_t), value :: value
      integer(c_size_t), value :: nbytes
      integer(c_int) :: fh_put_val
    end function fh_put_val

    function fh_get_val(ctx, rank, src, nbytes, value_out) bind(C, name="fh_get_val")
      import :: c_int, c_int64_t, c_ptr, c_size_t
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: src
      integer(c_size_t), value :: nbytes
      integer(c_int64_t), intent(out) :: value_out
      integer(c_int) :: fh_get_val
    end function fh_get_val

    function fh_memset(ctx, rank, dst, value, nbytes) bind(C, name="fh_memset")
      import :: c_int, c_ptr, c_size_t
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: dst
      integer(c_int), value :: value
      integer(c_size_t), value :: nbytes
      integer(c_int) :: fh_memset
    end function fh_memset

    function fh_memset_nb(ctx, rank, dst, value, nbytes, h_out) bind(C, name="fh_memset_nb")
      import :: c_int, c_int64_t, c_ptr, c_size_t
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: dst
      integer(c_int), value :: value
      integer(c_size_t), value :: nbytes
      integer(c_int64_t), intent(out) :: h_out
      integer(c_int) :: fh_memset_nb
    end function fh_memset_nb

    function fh_memset_nbi(ctx, rank, dst, value, nbytes) bind(C, name="fh_memset_nbi")
      import :: c_int, c_ptr, c_size_t
      type(c_ptr), value :: ctx
      integer(c_int), value :: rank
      type(c_ptr), value :: dst
      integer(c_int), value :: value
      integer(c_size_t), value :: nbytes
      integer(c_int) :: fh_memset_nbi
    end function fh_memset_nbi

    function fh_begin_nbi_accessregion(ctx) bind(C, name="fh_begin_nbi_accessregion")
      import :: c_int, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int) :: fh_begin_nbi_accessregion
    end function fh_begin_nbi_accessregion

    function fh_end_nbi_accessregion(ctx, h_out) bind(C, name="fh_end_nbi_accessregion")
      import :: c_int, c_int64_t, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int64_t), intent(out) :: h_out
      integer(c_int) :: fh_end_nbi_accessregion
    end function fh_end_nbi_accessregion

    function fh_hsl_init(ctx, hsl_out) bind(C, name="fh_hsl_init")
      import :: c_int, c_ptr
      type(c_ptr), value :: ctx
      type(c_ptr), intent(out) :: hsl_out
      integer(c_int) :: fh_hsl_init
    end function fh_hsl_init

    function fh_hsl_lock(hsl) bind(C, name="fh_hsl_lock")
      import :: c_int, c_ptr
      type(c_ptr), value :: hsl
      integer(c_int) :: fh_hsl_lock
    end function fh_hsl_lock

    ! FH_OK or FH_NOT_READY (another thread holds it).
    function fh_hsl_trylock(hsl) bind(C, name="fh_hsl_trylock")
      import :: c_int, c_ptr
      type(c_ptr), value :: hsl
      integer(c_int) :: fh_hsl_trylock
    end function fh_hsl_trylock

    function fh_hsl_unlock(hsl) bind(C, name="fh_hsl_unlock")
      import :: c_int, c_ptr
      type(c_ptr), value :: hsl
      integer(c_int) :: fh_hsl_unlock
    end function fh_hsl_unlock

    function fh_hsl_destroy(hsl) bind(C, name="fh_hsl_destroy")
      import :: c_int, c_ptr
      type(c_ptr), value :: hsl
      integer(c_int) :: fh_hsl_destroy
    end function fh_hsl_destroy

    function fh_hold_interrupts(ctx) bind(C, name="fh_hold_interrupts")
      import :: c_int, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int) :: fh_hold_interrupts
    end function fh_hold_interrupts

    function fh_resume_interrupts(ctx) bind(C, name="fh_resume_interrupts")
      import :: c_int, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int) :: fh_resume_interrupts
    end function fh_resume_interrupts
  end interface

contains

  ! fh_strerror(status) as a Fortran string.
  function fh_strerror_str(status) result(s)
    integer(c_int), intent(in) :: status
    character(len=:), allocatable :: s
    integer, parameter :: max_len = 4096
    type(c_ptr) :: p
    character(kind=c_char), pointer :: chars(:)
    integer :: i, n
    p = fh_strerror(status)
    if (.not. c_associated(p)) then
      s = ""
      return
    end if
    call c_f_pointer(p, chars, [max_len])
    n = 0
    do while (n < max_len)
      if (chars(n + 1) == c_null_char) exit
      n = n + 1
    end do
    allocate (character(len=n) :: s)
    do i = 1, n
      s(i:i) = chars(i)
    end do
  end function fh_strerror_str

  ! This thread's last detailed error message (fh_last_error) as a Fortran string.
  function fh_last_error_str() result(s)
    character(len=:), allocatable :: s
    character(kind=c_char), allocatable, target :: buf(:)
    integer(c_size_t) :: n, got
    integer :: i
    n = fh_last_error(c_null_ptr, 0_c_size_t)
    allocate (buf(n + 1))
    got = fh_last_error(c_loc(buf), n + 1)
    n = min(n, got)
    allocate (character(len=int(n)) :: s)
    do i = 1, int(n)
      s(i:i) = buf(i)
    end do
  end function fh_last_error_str

end module firehose
