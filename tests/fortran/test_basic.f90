! Fortran test of the firehose module (include/firehose.f90) at 2+ ranks:
! fh_init_comm_f on MPI_COMM_WORLD, fh_rank/fh_size, fh_config_t layout, fh_malloc,
! address exchange with MPI_Allgather, ring fh_put + fh_get of real(c_double) data,
! a Fortran short-AM handler with a reply, fh_put_nb + fh_wait, fh_stats_get into
! the fh_stats_t derived type (including the firehose-SMP da_* fields),
! fh_stats_thread_get into fh_thread_stats_t and fh_stats_thread_reset, an rpipe
! between ranks 0 and 1 (half duplex, 0 writes: rpipe_rmalloc of 10 c_int, filled
! through rpipe_rmem + c_f_pointer, rpipe_rwrite; 1 rpipe_rread, checks length and
! values, rpipe_rfree, and a second rpipe_rfree is refused; rpipe_stats into the
! rpipe_stats_t derived type; rpipe_close; ranks >= 2 sit it out), then the
! synchronisation calls (issue 6) on words of an fh_malloc area at rank 0:
! fh_allgather of the area addresses (checked against MPI_Allgather); every rank
! fh_atomic_fetch_add_i64 (blocking and _nb + fh_wait) on one counter, the
! fetched old values of all ranks forming exactly 0 .. total-1; one
! fh_atomic_cas_i64 race with exactly one winner (fh_allreduce FH_INT32 FH_SUM of
! the wins) that every rank then fetches; a u32 compare&swap increment loop;
! fh_lock_create / acquire / release around a non-atomic fh_get + fh_put
! increment (any lost update fails), fh_lock_try / a second release (FH_ERR_STATE)
! / fh_lock_destroy; split-phase fh_barrier_notify / wait (named id) and
! notify / try (FH_BARRIER_ANONYMOUS) with a deliberately late last rank, each
! proven by an arrival counter every rank reads after the barrier, plus the
! FH_ERR_STATE cases; fh_broadcast of real(c_double) from every root;
! fh_allreduce of real(c_double) (FH_SUM, FH_MAX; exact values, bit-identical to
! MPI_Allreduce), fh_reduce FH_MIN to a non-zero root with c_null_ptr elsewhere,
! and fh_allgather of integer(c_int32_t). Then fh_finalize.
! Prints "PASS fortran" on rank 0; any failure is `error stop 1`.
module test_basic_state
  use firehose
  implicit none
  integer(c_int), parameter :: H_PING = 200, H_PONG = 201
  type(c_ptr) :: ctx = c_null_ptr
  integer :: me = -1
  integer, target :: pings = 0, pongs = 0
  integer :: handler_errors = 0
contains

  subroutine fail(msg)
    use, intrinsic :: iso_fortran_env, only: error_unit
    character(len=*), intent(in) :: msg
    write (error_unit, '(a,i0,2a)') "[rank ", me, "] FAIL fortran: ", msg
    write (error_unit, '(a,i0,2a)') "[rank ", me, "]   last error: ", fh_last_error_str()
    error stop 1
  end subroutine fail

  subroutine check(cond, msg)
    logical, intent(in) :: cond
    character(len=*), intent(in) :: msg
    if (.not. cond) call fail(msg)
  end subroutine check

  subroutine check_rc(rc, want, what)
    integer(c_int), intent(in) :: rc, want
    character(len=*), intent(in) :: what
    character(len=32) :: num
    if (rc /= want) then
      write (num, '(i0)') rc
      call fail(what // " returned " // trim(num) // " (" // fh_strerror_str(rc) // ")")
    end if
  end subroutine check_rc

  ! Request handler: args = [sender, seq, 1000*sender + seq]; replies with
  ! [me, seq, 2 * args(3)].
  subroutine on_ping(token, buf, nbytes, args, nargs, user) bind(C)
    type(c_ptr), value :: token, buf, args, user
    integer(c_size_t), value :: nbytes, nargs
    integer(c_int64_t), pointer :: a(:)
    integer(c_int64_t) :: r(3)
    integer(c_int) :: rc
    integer, pointer :: counter
    if (c_associated(buf) .or. nbytes /= 0 .or. nargs /= 3) then
      handler_errors = handler_errors + 1
      return
    end if
    call c_f_pointer(args, a, [nargs])
    if (a(1) /= int(fh_am_source(token), c_int64_t) .or. a(3) /= 1000 * a(1) + a(2)) &
      handler_errors = handler_errors + 1
    call c_f_pointer(user, counter)
    counter = counter + 1
    r = [int(me, c_int64_t), a(2), 2 * a(3)]
    rc = fh_am_reply_short(token, H_PONG, r, 3_c_size_t)
    if (rc /= FH_OK) handler_errors = handler_errors + 1
  end subroutine on_ping

  subroutine on_pong(token, buf, nbytes, args, nargs, user) bind(C)
    type(c_ptr), value :: token, buf, args, user
    integer(c_size_t), value :: nbytes, nargs
    integer(c_int64_t), pointer :: a(:)
    integer, pointer :: counter
    if (c_associated(buf) .or. nbytes /= 0 .or. nargs /= 3) then
      handler_errors = handler_errors + 1
      return
    end if
    call c_f_pointer(args, a, [nargs])
    if (a(1) /= int(fh_am_source(token), c_int64_t) .or. a(3) /= 2 * (1000 * int(me, c_int64_t) + a(2))) &
      handler_errors = handler_errors + 1
    call c_f_pointer(user, counter)
    counter = counter + 1
  end subroutine on_pong

  ! MPI barrier that keeps serving active messages.
  subroutine poll_barrier()
    use mpi
    integer :: req, ierr
    logical :: done
    call MPI_Ibarrier(MPI_COMM_WORLD, req, ierr)
    done = .false.
    do while (.not. done)
      call check_rc(fh_poll(ctx), FH_OK, "fh_poll")
      call MPI_Test(req, done, MPI_STATUS_IGNORE, ierr)
    end do
  end subroutine poll_barrier

  ! Busy for `seconds` without calling the library.
  subroutine spin(seconds)
    use mpi
    double precision, intent(in) :: seconds
    double precision :: t
    t = MPI_Wtime()
    do while (MPI_Wtime() - t < seconds)
    end do
  end subroutine spin
end module test_basic_state

program test_basic
  use mpi
  use firehose
  use test_basic_state
  implicit none
  integer, parameter :: n = 1000, npings = 20
  integer :: ierr, np, right, left, i, k, mpi_me, mpi_np
  integer(c_size_t) :: nbytes
  type(fh_config_t), target :: cfg
  type(fh_stats_t), target :: stats
  type(fh_thread_stats_t), target :: tstats
  type(c_ptr) :: heap
  real(c_double), pointer :: hx(:)
  real(c_double), target :: src(n), dst(n), src2(n)
  integer(c_intptr_t) :: mine
  integer(c_intptr_t), allocatable :: addrs(:)
  type(c_ptr) :: remote
  integer(c_int64_t) :: h, args(3)
  double precision :: t0
  integer, parameter :: nint = 10
  integer(c_size_t), parameter :: pipe_width = 4096
  type(c_ptr) :: pipe
  type(rpipe_stats_t), target :: pst
  integer(c_int64_t) :: raddr
  integer(c_size_t) :: rlen
  integer(c_int), pointer :: iv(:)
  ! issue 6: synchronisation
  integer, parameter :: nadd = 40, ncas = 10, nlock = 200, nbc = 37, nred = 64, ngat = 3
  integer(c_size_t), parameter :: sync_bytes = 128
  type(c_ptr) :: sync_area, r0word, lock
  integer(c_int64_t), pointer :: sw(:)
  integer(c_int32_t), pointer :: sw32(:)
  integer(c_intptr_t), allocatable, target :: saddrs(:), saddrs_mpi(:)
  integer(c_intptr_t), target :: smine
  integer(c_int64_t), target :: olds(nadd), oldv, v64
  integer(c_int64_t), allocatable, target :: all_olds(:)
  integer(c_int64_t), asynchronous :: old_nb
  logical, allocatable :: seen(:)
  integer(c_int32_t), target :: won, nwon, o32, e32, gat(ngat)
  integer(c_int32_t), allocatable, target :: all_gat(:)
  integer(c_int) :: rc
  integer :: root, polls, tries
  real(c_double), target :: bc(nbc), rsrc(nred), rdst(nred), rmpi(nred), rmin(nred)

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, mpi_me, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, mpi_np, ierr)
  me = mpi_me

  ! fh_config_t mirrors the C struct: same size, fields land where C puts them.
  call check(c_sizeof(cfg) == 64_c_size_t, "sizeof(fh_config_t) differs from C (64)")
  call check_rc(fh_version_check(FH_VERSION_MAJOR, FH_VERSION_MINOR, c_sizeof(cfg)), FH_OK, "fh_version_check")
  call check(fh_version() == FH_VERSION_MAJOR * 65536 + FH_VERSION_MINOR * 256 + FH_VERSION_PATCH, "fh_version")
  call fh_config_init(c_loc(cfg))
  call check(cfg%struct_size == c_sizeof(cfg), "cfg%struct_size")
  call check(cfg%progress == FH_PROGRESS_POLL .or. cfg%progress == FH_PROGRESS_THREAD, "cfg%progress")
  ! am_credits 0 = auto (the default)
  call check(cfg%am_credits == 0 .and. cfg%am_recv_buffers >= 2, "cfg%am_credits / am_recv_buffers")
  call check(cfg%am_max_long >= cfg%am_max_medium .and. cfg%am_max_medium >= 512, "cfg%am_max_*")
  call check(cfg%pin == FH_PIN_MLOCK .or. cfg%pin == FH_PIN_NONE, "cfg%pin")
  call check(cfg%mpi_thread >= FH_THREAD_SINGLE .and. cfg%mpi_thread <= FH_THREAD_MULTIPLE, "cfg%mpi_thread")
  call check(fh_am_max_args() == 16_c_size_t, "fh_am_max_args")
  call check(len(fh_strerror_str(FH_ERR_ACCESS)) > 0, "fh_strerror")

  ! A bad call gives the documented status and a message.
  call check_rc(fh_poll(c_null_ptr), FH_ERR_INVALID_ARG, "fh_poll(NULL)")
  call check(index(fh_last_error_str(), "ctx") > 0, "fh_last_error after fh_poll(NULL)")

  call check_rc(fh_init_comm_f(MPI_COMM_WORLD, c_null_ptr, ctx), FH_OK, "fh_init_comm_f")
  call check(fh_rank(ctx) == mpi_me, "fh_rank")
  np = fh_size(ctx)
  call check(np == mpi_np, "fh_size")
  right = mod(me + 1, np)
  left = mod(me + np - 1, np)
  call check(fh_am_max_medium(ctx) == cfg%am_max_medium, "fh_am_max_medium")

  ! Heap memory, addresses exchanged as integers.
  nbytes = int(2 * n, c_size_t) * c_sizeof(src(1))
  heap = fh_malloc(ctx, nbytes)
  call check(c_associated(heap), "fh_malloc")
  call c_f_pointer(heap, hx, [2 * n])
  hx = -1.0_c_double
  allocate (addrs(0:np - 1))
  mine = transfer(heap, mine)
  call MPI_Allgather(mine, 1, MPI_INTEGER8, addrs, 1, MPI_INTEGER8, MPI_COMM_WORLD, ierr)
  call check(addrs(me) == mine, "MPI_Allgather of addresses")
  call MPI_Barrier(MPI_COMM_WORLD, ierr)

  ! Ring: put into the right neighbour's heap, check what the left one put here,
  ! get it back from the right neighbour.
  nbytes = int(n, c_size_t) * c_sizeof(src(1))
  do i = 1, n
    src(i) = real(me, c_double) * 1.0e6_c_double + real(i, c_double) + 0.25_c_double
  end do
  remote = transfer(addrs(right), remote)
  call check_rc(fh_put(ctx, right, remote, c_loc(src), nbytes), FH_OK, "fh_put")
  call check_rc(fh_barrier(ctx), FH_OK, "fh_barrier")
  do i = 1, n
    if (hx(i) /= real(left, c_double) * 1.0e6_c_double + real(i, c_double) + 0.25_c_double) &
      call fail("ring fh_put: wrong value landed")
  end do
  call check(all(hx(n + 1:) == -1.0_c_double), "fh_put wrote past its end")
  dst = 0.0_c_double
  call check_rc(fh_get(ctx, c_loc(dst), right, remote, nbytes), FH_OK, "fh_get")
  call check(all(dst == src), "ring fh_get returned other values")
  call MPI_Barrier(MPI_COMM_WORLD, ierr)

  ! Non-blocking put into the second half, completed with fh_wait.
  src2 = -src
  remote = transfer(addrs(right) + int(nbytes, c_intptr_t), remote)
  h = -7_c_int64_t
  call check_rc(fh_put_nb(ctx, right, remote, c_loc(src2), nbytes, h), FH_OK, "fh_put_nb")
  call check(h /= FH_HANDLE_NULL .and. h /= -7_c_int64_t, "fh_put_nb handle")
  call check_rc(fh_wait(ctx, h), FH_OK, "fh_wait")
  call check_rc(fh_wait(ctx, h), FH_ERR_INVALID_ARG, "fh_wait on a retired handle")
  dst = 0.0_c_double
  call check_rc(fh_get(ctx, c_loc(dst), right, remote, nbytes), FH_OK, "fh_get after fh_put_nb")
  call check(all(dst == src2), "fh_put_nb data not visible after fh_wait")
  call MPI_Barrier(MPI_COMM_WORLD, ierr)
  do i = 1, n
    if (hx(n + i) /= -(real(left, c_double) * 1.0e6_c_double + real(i, c_double) + 0.25_c_double)) &
      call fail("fh_put_nb: wrong value landed")
  end do

  ! Short AMs to a Fortran handler, each answered by a reply.
  call check_rc(fh_am_register(ctx, H_PING, c_funloc(on_ping), c_loc(pings)), FH_OK, "fh_am_register ping")
  call check_rc(fh_am_register(ctx, H_PONG, c_funloc(on_pong), c_loc(pongs)), FH_OK, "fh_am_register pong")
  call check_rc(fh_am_register(ctx, 5_c_int, c_funloc(on_ping), c_null_ptr), FH_ERR_INVALID_ARG, &
                "fh_am_register at a library index")
  call MPI_Barrier(MPI_COMM_WORLD, ierr)
  do k = 1, npings
    args = [int(me, c_int64_t), int(k, c_int64_t), 1000_c_int64_t * me + k]
    call check_rc(fh_am_request_short(ctx, right, H_PING, args, 3_c_size_t), FH_OK, "fh_am_request_short")
  end do
  t0 = MPI_Wtime()
  do while (pongs < npings)
    call check_rc(fh_poll(ctx), FH_OK, "fh_poll")
    if (MPI_Wtime() - t0 > 60.0d0) call fail("AM replies did not arrive")
  end do
  call poll_barrier()
  call check(pings == npings, "ping handler count")
  call check(pongs == npings, "pong handler count")
  call check(handler_errors == 0, "a handler saw wrong arguments")

  ! Statistics land in the fh_stats_t derived type.
  stats%struct_size = c_sizeof(stats)
  call check_rc(fh_stats_get(ctx, c_loc(stats)), FH_OK, "fh_stats_get")
  call check(stats%struct_size > 0, "fh_stats_t struct_size is 0")
  call check(stats%struct_size == c_sizeof(stats), "sizeof(fh_stats_t) differs from C")
  call check(stats%limit_bytes > 0, "fh_stats_t limit_bytes is 0")
  call check(stats%puts >= 2, "fh_stats_t puts: fewer than the 2 puts made")
  call check(stats%da_wins <= stats%da_entries, "fh_stats_t da_wins > da_entries")
  call check(stats%da_entries >= 0 .and. stats%rollbacks >= 0 .and. stats%da_waits >= 0 &
             .and. stats%da_stall_ns >= 0, "fh_stats_t da_* fields negative (garbage)")
  call check_rc(fh_stats_get(c_null_ptr, c_loc(stats)), FH_ERR_INVALID_ARG, "fh_stats_get(NULL)")

  ! This thread's firehose-SMP counters land in fh_thread_stats_t.
  tstats%struct_size = 0
  tstats%requests = -1
  call check_rc(fh_stats_thread_get(c_loc(tstats)), FH_OK, "fh_stats_thread_get")
  call check(tstats%struct_size == c_sizeof(tstats), "sizeof(fh_thread_stats_t) differs from C")
  call check(tstats%requests >= 0, "fh_thread_stats_t requests not written")
  call check(tstats%da_wins <= tstats%da_entries, "fh_thread_stats_t da_wins > da_entries")
  call check(tstats%da_entries <= stats%da_entries, "thread da_entries > context da_entries (one thread)")
  call check_rc(fh_stats_thread_reset(), FH_OK, "fh_stats_thread_reset")
  call check_rc(fh_stats_thread_get(c_loc(tstats)), FH_OK, "fh_stats_thread_get after reset")
  call check(tstats%requests == 0 .and. tstats%da_entries == 0 .and. tstats%rollbacks == 0, &
             "fh_stats_thread_reset left counters")
  call check_rc(fh_stats_thread_get(c_null_ptr), FH_ERR_INVALID_ARG, "fh_stats_thread_get(NULL)")

  ! rpipe: rank 0 writes 10 c_int into rank 1's heap over a half-duplex pipe.
  ! rpipe_stats_t mirrors the C struct: 13 uint64_t then a double, 112 bytes.
  call check(c_sizeof(pst) == 112_c_size_t, "sizeof(rpipe_stats_t) differs from C (112)")
  if (me <= 1 .and. np >= 2) then
    pipe = c_null_ptr
    call check_rc(rpipe_open(ctx, me, RPIPE_WRITER, pipe_width, RPIPE_HALF_DUPLEX, RPIPE_NEXT_FIT, pipe), &
                  FH_ERR_INVALID_ARG, "rpipe_open with peer == self")
    if (me == 0) then
      call check_rc(rpipe_open(ctx, 1_c_int, RPIPE_WRITER, pipe_width, RPIPE_HALF_DUPLEX, RPIPE_NEXT_FIT, &
                               pipe), FH_OK, "rpipe_open (writer)")
      call check(c_associated(pipe), "rpipe_open gave a NULL pipe")
      raddr = 0
      call check_rc(rpipe_rmalloc(pipe, int(nint, c_size_t) * c_sizeof(1_c_int), raddr), FH_OK, "rpipe_rmalloc")
      call check(raddr /= 0, "rpipe_rmalloc gave address 0")
      call c_f_pointer(rpipe_rmem(pipe, raddr), iv, [nint])
      call check(associated(iv), "rpipe_rmem on the writer gave NULL")
      do i = 1, nint
        iv(i) = int(100 * i + 7, c_int)
      end do
      call check_rc(rpipe_rwrite(pipe, raddr), FH_OK, "rpipe_rwrite")
      call check(.not. c_associated(rpipe_rmem(pipe, raddr)), "rpipe_rmem after rpipe_rwrite is not NULL")
      call check_rc(rpipe_rwrite(pipe, raddr), FH_ERR_INVALID_ARG, "rpipe_rwrite of a written address")
      call check_rc(rpipe_rmalloc(pipe, pipe_width + 1, raddr), FH_ERR_INVALID_ARG, "rpipe_rmalloc over the width")
      call check_rc(rpipe_rread(pipe, raddr, rlen), FH_ERR_STATE, "rpipe_rread on the writer")
      call check_rc(rpipe_stats(pipe, c_loc(pst)), FH_OK, "rpipe_stats (writer)")
      call check(pst%messages_written == 1 .and. pst%messages_read == 0, "rpipe_stats_t messages_* (writer)")
      call check(pst%bytes_written == int(nint, c_int64_t) * 4, "rpipe_stats_t bytes_written")
      call check(pst%max_message == int(pipe_width, c_int64_t), "rpipe_stats_t max_message")
      call check(pst%heap_allocations == 1, "rpipe_stats_t heap_allocations (one unfreed message)")
      call check(pst%heap_free_bytes == int(pipe_width, c_int64_t) - 64, "rpipe_stats_t heap_free_bytes")
      call check(pst%heap_largest_free <= pst%heap_free_bytes, "rpipe_stats_t heap_largest_free")
      call check(pst%heap_fragmentation >= 0.0_c_double .and. pst%heap_fragmentation < 1.0_c_double, &
                 "rpipe_stats_t heap_fragmentation")
    else
      call check_rc(rpipe_open(ctx, 0_c_int, RPIPE_READER, pipe_width, RPIPE_HALF_DUPLEX, RPIPE_NEXT_FIT, &
                               pipe), FH_OK, "rpipe_open (reader)")
      call check(c_associated(pipe), "rpipe_open gave a NULL pipe")
      call check_rc(rpipe_rmalloc(pipe, 4_c_size_t, raddr), FH_ERR_STATE, "rpipe_rmalloc on the reader")
      raddr = 0
      rlen = 0
      call check_rc(rpipe_rread(pipe, raddr, rlen), FH_OK, "rpipe_rread")
      call check(raddr /= 0, "rpipe_rread gave address 0")
      call check(rlen == int(nint, c_size_t) * c_sizeof(1_c_int), "rpipe_rread: wrong length")
      call c_f_pointer(rpipe_rmem(pipe, raddr), iv, [nint])
      call check(associated(iv), "rpipe_rmem on the reader gave NULL")
      do i = 1, nint
        if (iv(i) /= int(100 * i + 7, c_int)) call fail("rpipe_rread: wrong value in the message")
      end do
      call check_rc(rpipe_try_rread(pipe, raddr, rlen), FH_NOT_READY, "rpipe_try_rread with nothing sent")
      call check_rc(rpipe_rfree(pipe, raddr), FH_OK, "rpipe_rfree")
      call check_rc(rpipe_rfree(pipe, raddr), FH_ERR_INVALID_ARG, "second rpipe_rfree of the same address")
      call check(.not. c_associated(rpipe_rmem(pipe, raddr)), "rpipe_rmem after rpipe_rfree is not NULL")
      call check_rc(rpipe_stats(pipe, c_loc(pst)), FH_OK, "rpipe_stats (reader)")
      call check(pst%messages_read == 1 .and. pst%messages_written == 0, "rpipe_stats_t messages_* (reader)")
      call check(pst%bytes_read == int(nint, c_int64_t) * 4, "rpipe_stats_t bytes_read")
      call check(pst%refused == 0, "rpipe_stats_t refused")
    end if
  end if
  ! The reader's try_rread above must run before the writer closes its end.
  call poll_barrier()
  if (me <= 1 .and. np >= 2) then
    call check_rc(rpipe_close(pipe), FH_OK, "rpipe_close")
    call check_rc(rpipe_stats(pipe, c_loc(pst)), FH_ERR_STATE, "rpipe_stats after rpipe_close")
  end if

  ! ---- issue 6: atomics, lock, split-phase barrier, collectives ----
  ! Words of rank 0's area: sw(1) fetch&add counter, sw(2) compare&swap word,
  ! sw(3) lock-protected plain counter, sw(4) arrivals at barrier 1, sw(5) at
  ! barrier 2, sw32(11) the u32 compare&swap counter.
  sync_area = fh_malloc(ctx, sync_bytes)
  call check(c_associated(sync_area), "fh_malloc (sync area)")
  call c_f_pointer(sync_area, sw, [sync_bytes / 8])
  call c_f_pointer(sync_area, sw32, [sync_bytes / 4])
  sw = 0
  sw(2) = -1
  smine = transfer(sync_area, smine)
  allocate (saddrs(0:np - 1), saddrs_mpi(0:np - 1))
  saddrs = 0
  call check_rc(fh_allgather(ctx, c_loc(smine), c_sizeof(smine), c_loc(saddrs)), FH_OK, "fh_allgather (addresses)")
  call MPI_Allgather(smine, 1, MPI_INTEGER8, saddrs_mpi, 1, MPI_INTEGER8, MPI_COMM_WORLD, ierr)
  call check(all(saddrs == saddrs_mpi), "fh_allgather of addresses differs from MPI_Allgather")
  call check_rc(fh_barrier(ctx), FH_OK, "fh_barrier (sync area ready)")

  ! fetch&add: every rank takes nadd tickets from rank 0's counter (the last one
  ! with the _nb form); the old values of all ranks are exactly 0 .. np*nadd-1.
  r0word = transfer(saddrs(0), r0word)
  do k = 1, nadd - 1
    call check_rc(fh_atomic_fetch_add_i64(ctx, 0_c_int, r0word, 1_c_int64_t, olds(k)), FH_OK, &
                  "fh_atomic_fetch_add_i64")
  end do
  h = -7_c_int64_t
  old_nb = -1
  call check_rc(fh_atomic_fetch_add_i64_nb(ctx, 0_c_int, r0word, 1_c_int64_t, old_nb, h), FH_OK, &
                "fh_atomic_fetch_add_i64_nb")
  call check(h /= -7_c_int64_t, "fh_atomic_fetch_add_i64_nb did not write the handle")
  call check_rc(fh_wait(ctx, h), FH_OK, "fh_wait (atomic _nb)")
  olds(nadd) = old_nb
  allocate (all_olds(np * nadd), seen(0:np * nadd - 1))
  call check_rc(fh_allgather(ctx, c_loc(olds), c_sizeof(olds), c_loc(all_olds)), FH_OK, "fh_allgather (olds)")
  call check(all(all_olds(me * nadd + 1:(me + 1) * nadd) == olds), "fh_allgather: own block differs")
  seen = .false.
  do k = 1, np * nadd
    if (all_olds(k) < 0 .or. all_olds(k) >= np * nadd) call fail("fetch&add: old value out of range")
    if (seen(all_olds(k))) call fail("fetch&add: two ranks got the same old value (lost atomicity)")
    seen(all_olds(k)) = .true.
  end do
  call check_rc(fh_barrier(ctx), FH_OK, "fh_barrier (after fetch&add)")
  call check_rc(fh_atomic_fetch_i64(ctx, 0_c_int, r0word, v64), FH_OK, "fh_atomic_fetch_i64")
  call check(v64 == int(np * nadd, c_int64_t), "fetch&add counter: wrong final value")

  ! compare&swap race on sw(2) (starts at -1): exactly one rank wins.
  r0word = transfer(saddrs(0) + 8, r0word)
  oldv = -99
  call check_rc(fh_atomic_cas_i64(ctx, 0_c_int, r0word, -1_c_int64_t, int(me, c_int64_t), oldv), FH_OK, &
                "fh_atomic_cas_i64")
  won = merge(1_c_int32_t, 0_c_int32_t, oldv == -1_c_int64_t)
  if (won == 0) call check(oldv >= 0 .and. oldv < np, "cas: a loser saw a value no rank wrote")
  nwon = -1
  call check_rc(fh_allreduce(ctx, c_loc(won), c_loc(nwon), 1_c_size_t, FH_INT32, FH_SUM), FH_OK, &
                "fh_allreduce (cas winners)")
  call check(nwon == 1, "cas: not exactly one winner")
  call check_rc(fh_atomic_fetch_i64(ctx, 0_c_int, r0word, v64), FH_OK, "fh_atomic_fetch_i64 (cas word)")
  if (won == 1) call check(v64 == me, "cas: the winner's value is not in the word")
  if (won == 0) call check(v64 == oldv, "cas: a loser saw another value than the winner's")
  ! A failing cas leaves the word alone.
  call check_rc(fh_atomic_cas_i64(ctx, 0_c_int, r0word, -5_c_int64_t, 77_c_int64_t, oldv), FH_OK, &
                "fh_atomic_cas_i64 (failing)")
  call check(oldv == v64, "failing cas: wrong old value")

  ! u32 compare&swap increment loop on sw32(11).
  r0word = transfer(saddrs(0) + 40, r0word)
  do k = 1, ncas
    call check_rc(fh_atomic_fetch_u32(ctx, 0_c_int, r0word, e32), FH_OK, "fh_atomic_fetch_u32")
    tries = 0
    do
      call check_rc(fh_atomic_cas_u32(ctx, 0_c_int, r0word, e32, e32 + 1_c_int32_t, o32), FH_OK, &
                    "fh_atomic_cas_u32")
      if (o32 == e32) exit
      e32 = o32
      tries = tries + 1
      if (tries > 1000000) call fail("u32 cas loop does not make progress")
    end do
  end do
  call check_rc(fh_barrier(ctx), FH_OK, "fh_barrier (after cas)")
  if (me == 0) call check(sw32(11) == int(np * ncas, c_int32_t), "u32 cas counter: wrong final value")

  ! MCS lock at rank 0 around a non-atomic get + put increment of sw(3).
  lock = c_null_ptr
  call check_rc(fh_lock_create(ctx, 0_c_int, lock), FH_OK, "fh_lock_create")
  call check(c_associated(lock), "fh_lock_create gave a NULL lock")
  remote = transfer(saddrs(0) + 16, remote)
  do k = 1, nlock
    call check_rc(fh_lock_acquire(lock), FH_OK, "fh_lock_acquire")
    call check_rc(fh_get(ctx, c_loc(v64), 0_c_int, remote, 8_c_size_t), FH_OK, "fh_get (under lock)")
    v64 = v64 + 1
    call check_rc(fh_put(ctx, 0_c_int, remote, c_loc(v64), 8_c_size_t), FH_OK, "fh_put (under lock)")
    call check_rc(fh_lock_release(lock), FH_OK, "fh_lock_release")
  end do
  call check_rc(fh_lock_release(lock), FH_ERR_STATE, "fh_lock_release of a lock not held")
  call check_rc(fh_barrier(ctx), FH_OK, "fh_barrier (after lock loop)")
  if (me == 0) then
    call check(sw(3) == int(np * nlock, c_int64_t), "lock: lost update in the critical section")
    call check_rc(fh_lock_try(lock), FH_OK, "fh_lock_try on a free lock")
    call check_rc(fh_lock_release(lock), FH_OK, "fh_lock_release after fh_lock_try")
  end if
  call check_rc(fh_barrier(ctx), FH_OK, "fh_barrier (before fh_lock_destroy)")
  call check_rc(fh_lock_destroy(lock), FH_OK, "fh_lock_destroy")
  call check_rc(fh_lock_acquire(lock), FH_ERR_STATE, "fh_lock_acquire after fh_lock_destroy")

  ! Split-phase barrier, named id: the last rank arrives late; every rank added 1
  ! to sw(4) before notifying, so after the wait everyone reads np.
  call check_rc(fh_barrier_wait(ctx, 42_c_int64_t, 0_c_int), FH_ERR_STATE, "fh_barrier_wait without notify")
  if (me == np - 1) call spin(0.05d0)
  r0word = transfer(saddrs(0) + 24, r0word)
  call check_rc(fh_atomic_add_i64(ctx, 0_c_int, r0word, 1_c_int64_t), FH_OK, "fh_atomic_add_i64 (arrival 1)")
  call check_rc(fh_barrier_notify(ctx, 42_c_int64_t, 0_c_int), FH_OK, "fh_barrier_notify (id 42)")
  call check_rc(fh_barrier_notify(ctx, 42_c_int64_t, 0_c_int), FH_ERR_STATE, "second fh_barrier_notify")
  call check_rc(fh_barrier_wait(ctx, 42_c_int64_t, 0_c_int), FH_OK, "fh_barrier_wait (id 42)")
  call check_rc(fh_atomic_fetch_i64(ctx, 0_c_int, r0word, v64), FH_OK, "fh_atomic_fetch_i64 (arrival 1)")
  call check(v64 == np, "named split-phase barrier: a rank left before all arrived")

  ! Split-phase barrier, anonymous, completed by polling fh_barrier_try.
  if (me == np - 1) call spin(0.05d0)
  r0word = transfer(saddrs(0) + 32, r0word)
  call check_rc(fh_atomic_add_i64(ctx, 0_c_int, r0word, 1_c_int64_t), FH_OK, "fh_atomic_add_i64 (arrival 2)")
  call check_rc(fh_barrier_notify(ctx, 0_c_int64_t, FH_BARRIER_ANONYMOUS), FH_OK, "fh_barrier_notify (anonymous)")
  polls = 0
  t0 = MPI_Wtime()
  do
    rc = fh_barrier_try(ctx, 0_c_int64_t, FH_BARRIER_ANONYMOUS)
    if (rc == FH_OK) exit
    call check_rc(rc, FH_NOT_READY, "fh_barrier_try")
    polls = polls + 1
    if (MPI_Wtime() - t0 > 60.0d0) call fail("fh_barrier_try never completed")
  end do
  call check_rc(fh_atomic_fetch_i64(ctx, 0_c_int, r0word, v64), FH_OK, "fh_atomic_fetch_i64 (arrival 2)")
  call check(v64 == np, "anonymous split-phase barrier: a rank left before all arrived")
  if (np > 1 .and. me /= np - 1) call check(polls > 0, "fh_barrier_try was ready before the late rank arrived")

  ! Broadcast from every root.
  do root = 0, np - 1
    do i = 1, nbc
      bc(i) = merge(real(root, c_double) * 100.0_c_double + real(i, c_double) * 0.5_c_double, &
                    -1.0_c_double, me == root)
    end do
    call check_rc(fh_broadcast(ctx, int(root, c_int), c_loc(bc), c_sizeof(bc)), FH_OK, "fh_broadcast")
    do i = 1, nbc
      if (bc(i) /= real(root, c_double) * 100.0_c_double + real(i, c_double) * 0.5_c_double) &
        call fail("fh_broadcast: wrong value")
    end do
  end do

  ! Allreduce of doubles: exact values, identical to MPI_Allreduce.
  do i = 1, nred
    rsrc(i) = real(me, c_double) + real(i, c_double) * 0.25_c_double
  end do
  rdst = 0
  call check_rc(fh_allreduce(ctx, c_loc(rsrc), c_loc(rdst), int(nred, c_size_t), FH_DOUBLE, FH_SUM), FH_OK, &
                "fh_allreduce FH_DOUBLE FH_SUM")
  call MPI_Allreduce(rsrc, rmpi, nred, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, ierr)
  do i = 1, nred
    if (rdst(i) /= real(np * (np - 1) / 2, c_double) + real(np, c_double) * real(i, c_double) * 0.25_c_double) &
      call fail("fh_allreduce FH_SUM: wrong value")
  end do
  call check(all(rdst == rmpi), "fh_allreduce FH_SUM differs from MPI_Allreduce")
  call check_rc(fh_allreduce(ctx, c_loc(rsrc), c_loc(rdst), int(nred, c_size_t), FH_DOUBLE, FH_MAX), FH_OK, &
                "fh_allreduce FH_DOUBLE FH_MAX")
  do i = 1, nred
    if (rdst(i) /= real(np - 1, c_double) + real(i, c_double) * 0.25_c_double) &
      call fail("fh_allreduce FH_MAX: wrong value")
  end do
  call check_rc(fh_allreduce(ctx, c_loc(rsrc), c_loc(rdst), int(nred, c_size_t), FH_DOUBLE, FH_BXOR), &
                FH_ERR_INVALID_ARG, "fh_allreduce FH_DOUBLE FH_BXOR")
  ! Reduce FH_MIN to the last rank; dst is c_null_ptr on the others.
  rmin = -1
  if (me == np - 1) then
    call check_rc(fh_reduce(ctx, int(np - 1, c_int), c_loc(rsrc), c_loc(rmin), int(nred, c_size_t), FH_DOUBLE, &
                            FH_MIN), FH_OK, "fh_reduce FH_MIN (root)")
    do i = 1, nred
      if (rmin(i) /= real(i, c_double) * 0.25_c_double) call fail("fh_reduce FH_MIN: wrong value")
    end do
  else
    call check_rc(fh_reduce(ctx, int(np - 1, c_int), c_loc(rsrc), c_null_ptr, int(nred, c_size_t), FH_DOUBLE, &
                            FH_MIN), FH_OK, "fh_reduce FH_MIN")
  end if

  ! Allgather of integer(c_int32_t).
  do k = 1, ngat
    gat(k) = int(10 * me + k, c_int32_t)
  end do
  allocate (all_gat(ngat * np))
  all_gat = -1
  call check_rc(fh_allgather(ctx, c_loc(gat), c_sizeof(gat), c_loc(all_gat)), FH_OK, "fh_allgather (int32)")
  do i = 0, np - 1
    do k = 1, ngat
      if (all_gat(i * ngat + k) /= int(10 * i + k, c_int32_t)) call fail("fh_allgather: wrong value")
    end do
  end do

  call check_rc(fh_barrier(ctx), FH_OK, "fh_barrier (end of issue 6 section)")
  call fh_free(ctx, sync_area)
  call fh_free(ctx, heap)
  call check_rc(fh_finalize(ctx), FH_OK, "fh_finalize")
  call check_rc(fh_poll(ctx), FH_ERR_STATE, "fh_poll after fh_finalize")
  if (me == 0) print '(a)', "PASS fortran"
  call MPI_Finalize(ierr)
end program test_basic
