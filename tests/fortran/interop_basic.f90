! interop_basic.f90 -- a plain Fortran MPI program using firehose for RMA and
! synchronising only with MPI (MPI_BARRIER; no fh_barrier anywhere), at 2+ ranks.
!
! Every rank owns an fh_malloc'd heap area and an allocatable array registered with
! fh_mem_register, each of two halves (phase parity). Addresses go round with
! MPI_Allgather. In each phase every rank fh_put's a pattern into the right
! neighbour's heap half and registered half, enters MPI_BARRIER, checks what its left
! neighbour put into its own halves, and fh_get's its own data back from the right
! neighbour. Before that, the classic case: rank 0 spins for 0.2 s and then makes
! the first fh_put into rank 1's registered array `first` and into its plain
! (unregistered) allocatable array `plain`, while rank 1 (like every other rank)
! already waits in MPI_BARRIER; rank 1 then checks both.
! Rank 0 prints "interop_basic: OK (np=N)"; any failure aborts with MPI_Abort.
program interop_basic
  use mpi
  use firehose
  implicit none
  integer, parameter :: n = 1000, nphase = 6
  integer :: ierr, me, np, right, left, i, p, half
  type(c_ptr) :: ctx, heap, rheap, rreg
  ! volatile: firehose writes these behind the compiler's back (during MPI_Barrier)
  real(c_double), pointer, volatile :: hx(:)
  real(c_double), allocatable, target, volatile :: reg(:), first(:), plain(:)
  real(c_double), target :: src(n), dst(n)
  integer(c_intptr_t) :: mine(4)
  integer(c_intptr_t), allocatable :: addrs(:, :)
  integer(c_size_t) :: nbytes, area_bytes
  double precision :: t0

  p = 0
  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, me, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, np, ierr)
  if (np < 2) call fail("needs at least 2 ranks")
  call check_rc(fh_init_comm_f(MPI_COMM_WORLD, c_null_ptr, ctx), "fh_init_comm_f")
  if (fh_rank(ctx) /= me .or. fh_size(ctx) /= np) call fail("fh_rank/fh_size disagree with MPI")
  right = mod(me + 1, np)
  left = mod(me + np - 1, np)

  nbytes = int(n, c_size_t) * c_sizeof(src(1))
  area_bytes = 2 * nbytes
  heap = fh_malloc(ctx, area_bytes)
  if (.not. c_associated(heap)) call fail("fh_malloc")
  call c_f_pointer(heap, hx, [2 * n])
  hx = -1.0_c_double
  allocate (reg(2 * n))
  reg = -1.0_c_double
  call check_rc(fh_mem_register(ctx, c_loc(reg), area_bytes), "fh_mem_register")
  allocate (first(n))
  first = -1.0_c_double
  call check_rc(fh_mem_register(ctx, c_loc(first), nbytes), "fh_mem_register first")
  allocate (plain(n))
  plain = -1.0_c_double

  allocate (addrs(4, 0:np - 1))
  mine(1) = transfer(heap, mine(1))
  mine(2) = transfer(c_loc(reg), mine(2))
  mine(3) = transfer(c_loc(first), mine(3))
  mine(4) = transfer(c_loc(plain), mine(4))
  call MPI_Allgather(mine, 4, MPI_INTEGER8, addrs, 4, MPI_INTEGER8, MPI_COMM_WORLD, ierr)
  if (any(addrs(:, me) /= mine)) call fail("MPI_Allgather of addresses")

  ! Classic: rank 1 waits in MPI_BARRIER when rank 0's first put to its registered
  ! memory arrives.
  if (me == 0) then
    t0 = MPI_Wtime()
    do while (MPI_Wtime() - t0 < 0.2d0)
    end do
    do i = 1, n
      src(i) = val(0, 0, i)
    end do
    rreg = transfer(addrs(3, 1), rreg)
    call check_rc(fh_put(ctx, 1, rreg, c_loc(src), nbytes), "fh_put classic registered")
    src = -src
    rreg = transfer(addrs(4, 1), rreg)
    call check_rc(fh_put(ctx, 1, rreg, c_loc(src), nbytes), "fh_put classic plain")
  end if
  call MPI_Barrier(MPI_COMM_WORLD, ierr)
  if (me == 1) then
    do i = 1, n
      if (first(i) /= val(0, 0, i)) call fail("classic: wrong value in my registered array")
      if (plain(i) /= -val(0, 0, i)) call fail("classic: wrong value in my plain array")
    end do
  end if

  do p = 1, nphase
    half = mod(p, 2) * n ! offset of this phase's half, in elements
    do i = 1, n
      src(i) = val(me, p, i)
    end do
    rheap = transfer(addrs(1, right) + int(half, c_intptr_t) * 8, rheap)
    rreg = transfer(addrs(2, right) + int(half, c_intptr_t) * 8, rreg)
    call check_rc(fh_put(ctx, right, rheap, c_loc(src), nbytes), "fh_put heap")
    src = src + 0.25_c_double
    call check_rc(fh_put(ctx, right, rreg, c_loc(src), nbytes), "fh_put registered")
    call MPI_Barrier(MPI_COMM_WORLD, ierr)
    do i = 1, n
      if (hx(half + i) /= val(left, p, i)) call fail("wrong value in my heap area")
      if (reg(half + i) /= val(left, p, i) + 0.25_c_double) &
        call fail("wrong value in my registered area")
    end do
    dst = 0.0_c_double
    call check_rc(fh_get(ctx, c_loc(dst), right, rreg, nbytes), "fh_get registered")
    if (any(dst /= src)) call fail("fh_get of the registered area returned other values")
    dst = 0.0_c_double
    call check_rc(fh_get(ctx, c_loc(dst), right, rheap, nbytes), "fh_get heap")
    if (any(dst /= src - 0.25_c_double)) call fail("fh_get of the heap area returned other values")
  end do

  call check_rc(fh_mem_unregister(ctx, c_loc(reg), area_bytes), "fh_mem_unregister")
  call check_rc(fh_mem_unregister(ctx, c_loc(first), nbytes), "fh_mem_unregister first")
  call fh_free(ctx, heap)
  call check_rc(fh_finalize(ctx), "fh_finalize")
  deallocate (reg, first, plain, addrs)
  if (me == 0) write (*, '(a,i0,a)') "interop_basic: OK (np=", np, ")"
  call MPI_Finalize(ierr)

contains

  pure function val(who, phase, i) result(v)
    integer, intent(in) :: who, phase, i
    real(c_double) :: v
    v = real(who, c_double) * 1.0e6_c_double + real(phase, c_double) * 1.0e4_c_double &
        + real(i, c_double) + 0.5_c_double
  end function val

  subroutine fail(msg)
    use, intrinsic :: iso_fortran_env, only: error_unit
    character(len=*), intent(in) :: msg
    integer :: ie
    write (error_unit, '(a,i0,a,i0,2a)') "[rank ", me, "] interop_basic phase ", p, ": ", msg
    write (error_unit, '(a,i0,2a)') "[rank ", me, "]   fh_last_error: ", fh_last_error_str()
    call MPI_Abort(MPI_COMM_WORLD, 1, ie)
  end subroutine fail

  subroutine check_rc(rc, what)
    integer(c_int), intent(in) :: rc
    character(len=*), intent(in) :: what
    character(len=32) :: num
    if (rc /= FH_OK) then
      write (num, '(i0)') rc
      call fail(what // " returned " // trim(num) // " (" // fh_strerror_str(rc) // ")")
    end if
  end subroutine check_rc
end program interop_basic
