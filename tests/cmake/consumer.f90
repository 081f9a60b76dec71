! consumer.f90 -- a Fortran MPI program built against an installed firehose through
! its CMake package (tests/cmake/CMakeLists.txt). Each rank fh_put's its rank and a
! pattern into the right neighbour's plain allocatable array (nobody registered it:
! firehose pins it), then MPI_BARRIER, then checks what its left neighbour put.
! fh_strerror_str, a module procedure, checks that the module's object is linked.
! Rank 0 prints "PASS consumer_f (np=N)".
program consumer_f
  use mpi
  use firehose
  implicit none
  integer, parameter :: n = 512
  integer :: ierr, me, np, right, left, i
  type(c_ptr) :: ctx
  integer(c_int64_t), allocatable, target, volatile :: inbox(:)
  integer(c_int64_t), target :: src(n)
  integer(c_intptr_t) :: mine
  integer(c_intptr_t), allocatable :: addrs(:)

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, me, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, np, ierr)
  call check(fh_init_comm_f(MPI_COMM_WORLD, c_null_ptr, ctx), "fh_init_comm_f")
  if (len(fh_strerror_str(FH_OK)) == 0) call fail("fh_strerror_str(FH_OK) is empty")
  right = mod(me + 1, np)
  left = mod(me + np - 1, np)
  allocate (inbox(n), addrs(0:np - 1))
  inbox = -1
  mine = transfer(c_loc(inbox), mine)
  call MPI_Allgather(mine, 1, MPI_INTEGER8, addrs, 1, MPI_INTEGER8, MPI_COMM_WORLD, ierr)
  src = [(int(me, c_int64_t) * 1000000 + i, i = 1, n)]
  call check(fh_put(ctx, right, transfer(addrs(right), c_null_ptr), c_loc(src), &
                    int(n, c_size_t) * 8_c_size_t), "fh_put")
  call MPI_Barrier(MPI_COMM_WORLD, ierr)
  do i = 1, n
    if (inbox(i) /= int(left, c_int64_t) * 1000000 + i) call fail("wrong data from the left neighbour")
  end do
  call MPI_Barrier(MPI_COMM_WORLD, ierr)
  call check(fh_finalize(ctx), "fh_finalize")
  if (me == 0) print '(a, i0, a)', "PASS consumer_f (np=", np, ")"
  call MPI_Finalize(ierr)

contains

  subroutine fail(what)
    character(len=*), intent(in) :: what
    write (0, '(a, i0, 2a)') "[rank ", me, "] consumer_f FAIL: ", what
    call MPI_Abort(MPI_COMM_WORLD, 1, ierr)
  end subroutine fail

  subroutine check(rc, what)
    integer(c_int), intent(in) :: rc
    character(len=*), intent(in) :: what
    if (rc /= FH_OK) call fail(what // ": " // fh_strerror_str(rc) // " " // fh_last_error_str())
  end subroutine check
end program consumer_f
