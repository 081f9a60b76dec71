! interop_f08.f90 -- `use mpi_f08`: a rank that waits in MPI_Barrier (the Fortran 2008
! binding, which calls PMPI_Barrier directly in Open MPI and MPICH) must still answer
! the firehose move of a peer that puts into its plain (unregistered) array. Run with
! FH_SHM=0 so the move is needed: even ranks sleep, then put into their right
! neighbour, which went straight into MPI_Barrier. Then MPI_Ibarrier + MPI_Wait and
! MPI_Waitall (the other f08 calls the library covers).
program interop_f08
  use mpi_f08
  use firehose
  implicit none
  integer, parameter :: n = 512
  type(c_ptr) :: ctx
  integer :: me, np, right, left, rc, i
  integer(c_intptr_t) :: mine
  integer(c_intptr_t), allocatable :: addrs(:)
  real(c_double), allocatable, target, volatile :: plain(:)
  real(c_double), target :: src(n)
  type(MPI_Request) :: reqs(2)
  double precision :: t0

  call MPI_Init()
  call MPI_Comm_rank(MPI_COMM_WORLD, me)
  call MPI_Comm_size(MPI_COMM_WORLD, np)
  rc = fh_init_comm_f(MPI_COMM_WORLD%MPI_VAL, c_null_ptr, ctx)
  if (rc /= FH_OK) call fail("fh_init_comm_f")
  right = mod(me + 1, np)
  left = mod(me + np - 1, np)
  allocate(plain(n), addrs(0:np - 1))
  plain = -1
  mine = transfer(c_loc(plain), mine)
  call MPI_Allgather(mine, 1, MPI_INTEGER8, addrs, 1, MPI_INTEGER8, MPI_COMM_WORLD)
  do i = 1, n
    src(i) = me * 1000 + i
  end do
  if (mod(me, 2) == 0 .and. right /= me) then
    t0 = MPI_Wtime()
    do while (MPI_Wtime() - t0 < 0.2d0)
    end do
    rc = fh_put(ctx, right, transfer(addrs(right), c_null_ptr), c_loc(src), int(8 * n, c_size_t))
    if (rc /= FH_OK) call fail("fh_put into the right neighbour's plain array")
  end if
  call MPI_Barrier(MPI_COMM_WORLD)
  if (mod(left, 2) == 0 .and. left /= me) then
    do i = 1, n
      if (plain(i) /= left * 1000 + i) call fail("wrong data after MPI_Barrier")
    end do
  end if
  call MPI_Ibarrier(MPI_COMM_WORLD, reqs(1))
  call MPI_Wait(reqs(1), MPI_STATUS_IGNORE)
  call MPI_Ibarrier(MPI_COMM_WORLD, reqs(1))
  call MPI_Ibarrier(MPI_COMM_WORLD, reqs(2))
  call MPI_Waitall(2, reqs, MPI_STATUSES_IGNORE)
  rc = fh_finalize(ctx)
  if (rc /= FH_OK) call fail("fh_finalize")
  if (me == 0) print '(a, i0, a)', 'interop_f08: OK (np=', np, ')'
  call MPI_Finalize()
contains
  subroutine fail(what)
    character(*), intent(in) :: what
    print '(a, i0, 2a)', '[rank ', me, '] FAIL: ', what
    call MPI_Abort(MPI_COMM_WORLD, 1)
  end subroutine fail
end program interop_f08
