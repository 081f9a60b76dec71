! test_vis.f90 -- a Fortran array section moved with one strided put (fh_puts):
! a(2:40:3, 5:9, :) of every rank lands in the same section of its right
! neighbour's plain allocatable array b (nobody registered it: firehose pins it), the
! strides computed from c_loc differences as a Fortran user would. MPI_BARRIER
! separates the phases; then the same section comes back with fh_gets_nb.
! Every element of b is checked (inside the section: the left neighbour's values;
! outside: untouched). Rank 0 prints "test_vis (Fortran): OK (np=N)".
program test_vis
  use mpi
  use firehose
  implicit none
  integer, parameter :: n1 = 40, n2 = 10, n3 = 4
  real(c_double), allocatable, target :: a(:, :, :), c(:, :, :)
  real(c_double), allocatable, target, volatile :: b(:, :, :)
  integer :: ierr, me, np, right, left, i, j, k
  type(c_ptr) :: ctx
  integer(c_size_t) :: count(4), strides(3)
  integer(c_intptr_t) :: mine, base
  integer(c_intptr_t), allocatable :: addrs(:)
  integer(c_int64_t) :: h
  logical :: inside

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, me, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, np, ierr)
  call check(fh_init_comm_f(MPI_COMM_WORLD, c_null_ptr, ctx), "fh_init_comm_f")
  right = mod(me + 1, np)
  left = mod(me + np - 1, np)
  allocate (a(n1, n2, n3), b(n1, n2, n3), c(n1, n2, n3), addrs(0:np - 1))
  do k = 1, n3
    do j = 1, n2
      do i = 1, n1
        a(i, j, k) = value(me, i, j, k)
      end do
    end do
  end do
  b = -1.0_c_double
  mine = transfer(c_loc(b), mine)
  call MPI_Allgather(mine, 1, MPI_INTEGER8, addrs, 1, MPI_INTEGER8, MPI_COMM_WORLD, ierr)

  ! The section a(2:40:3, 5:9, :): one 8-byte element per run, then the three levels.
  base = transfer(c_loc(a(2, 5, 1)), base)
  count = [8_c_size_t, 13_c_size_t, 5_c_size_t, int(n3, c_size_t)]
  strides(1) = int(transfer(c_loc(a(5, 5, 1)), base) - base, c_size_t)
  strides(2) = int(transfer(c_loc(a(2, 6, 1)), base) - base, c_size_t)
  strides(3) = int(transfer(c_loc(a(2, 5, 2)), base) - base, c_size_t)
  ! b has a's shape: the same strides; its section starts at the same offset.
  call check(fh_puts(ctx, right, transfer(addrs(right) + (base - transfer(c_loc(a), base)), c_null_ptr), &
                     strides, c_loc(a(2, 5, 1)), strides, count, 3_c_size_t), "fh_puts")
  call MPI_Barrier(MPI_COMM_WORLD, ierr)
  do k = 1, n3
    do j = 1, n2
      do i = 1, n1
        inside = i >= 2 .and. mod(i - 2, 3) == 0 .and. j >= 5 .and. j <= 9
        if (inside .and. b(i, j, k) /= value(left, i, j, k)) call fail("a section element is wrong")
        if (.not. inside .and. b(i, j, k) /= -1.0_c_double) call fail("an element outside the section changed")
      end do
    end do
  end do
  call MPI_Barrier(MPI_COMM_WORLD, ierr)

  ! Back: the right neighbour's b section (which holds our a values) into c.
  c = -2.0_c_double
  call check(fh_gets_nb(ctx, c_loc(c(2, 5, 1)), strides, right, &
                        transfer(addrs(right) + (base - transfer(c_loc(a), base)), c_null_ptr), &
                        strides, count, 3_c_size_t, h), "fh_gets_nb")
  call check(fh_wait(ctx, h), "fh_wait")
  do k = 1, n3
    do j = 5, 9
      do i = 2, 40, 3
        if (c(i, j, k) /= a(i, j, k)) call fail("fh_gets_nb brought back a wrong element")
      end do
    end do
  end do
  call MPI_Barrier(MPI_COMM_WORLD, ierr)
  call check(fh_finalize(ctx), "fh_finalize")
  if (me == 0) print '(a, i0, a)', "test_vis (Fortran): OK (np=", np, ")"
  call MPI_Finalize(ierr)

contains

  pure real(c_double) function value(r, i, j, k)
    integer, intent(in) :: r, i, j, k
    value = real(r * 100000 + k * 1000 + j * 100 + i, c_double)
  end function value

  subroutine fail(what)
    character(len=*), intent(in) :: what
    write (0, '(a, i0, 2a)') "[rank ", me, "] test_vis FAIL: ", what
    call MPI_Abort(MPI_COMM_WORLD, 1, ierr)
  end subroutine fail

  subroutine check(rc, what)
    integer(c_int), intent(in) :: rc
    character(len=*), intent(in) :: what
    if (rc /= FH_OK) call fail(what // ": " // fh_strerror_str(rc) // " " // fh_last_error_str())
  end subroutine check
end program test_vis
