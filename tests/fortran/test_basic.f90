! Fortran test of the firehose module (include/firehose.f90) at 2+ ranks:
! fh_init_comm_f on MPI_COMM_WORLD, fh_rank/fh_size, fh_config_t layout, fh_malloc,
! address exchange with MPI_Allgather, ring fh_put + fh_get of real(c_double) data,
! a Fortran short-AM handler with a reply, fh_put_nb + fh_wait, fh_stats_get into
! the fh_stats_t derived type (including the firehose-SMP da_* fields),
! fh_stats_thread_get into fh_thread_stats_t and fh_stats_thread_reset, fh_finalize.
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

  call fh_free(ctx, heap)
  call check_rc(fh_finalize(ctx), FH_OK, "fh_finalize")
  call check_rc(fh_poll(ctx), FH_ERR_STATE, "fh_poll after fh_finalize")
  if (me == 0) print '(a)', "PASS fortran"
  call MPI_Finalize(ierr)
end program test_basic
