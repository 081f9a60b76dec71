! Fortran test of the firehose module (include/firehose.f90) at 2+ ranks:
! fh_init_comm_f on MPI_COMM_WORLD, fh_rank/fh_size, fh_config_t layout, fh_malloc,
! address exchange with MPI_Allgather, ring fh_put + fh_get of real(c_double) data,
! a Fortran short-AM handler with a reply, fh_put_nb + fh_wait, fh_stats_get into
! the fh_stats_t derived type (including the firehose-SMP da_* fields),
! fh_stats_thread_get into fh_thread_stats_t and fh_stats_thread_reset, an rpipe
! between ranks 0 and 1 (half duplex, 0 writes: rpipe_rmalloc of 10 c_int, filled
! through rpipe_rmem + c_f_pointer, rpipe_rwrite; 1 rpipe_rread, checks length and
! values, rpipe_rfree, and a second rpipe_rfree is refused; rpipe_stats into the
! rpipe_stats_t derived type; rpipe_close; ranks >= 2 sit it out), fh_finalize.
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

  call fh_free(ctx, heap)
  call check_rc(fh_finalize(ctx), FH_OK, "fh_finalize")
  call check_rc(fh_poll(ctx), FH_ERR_STATE, "fh_poll after fh_finalize")
  if (me == 0) print '(a)', "PASS fortran"
  call MPI_Finalize(ierr)
end program test_basic
