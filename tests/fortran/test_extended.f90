! test_extended.f90 -- value forms, memset, an access region, fh_test_some, a
! handler-safe lock, reductions on complex and logical values, put with signal
! and fh_split, from Fortran:
! every rank writes into its right neighbour's plain allocatable array;
! MPI_BARRIER separates the phases; every element is checked.
! Rank 0 prints "test_extended (Fortran): OK (np=N)".
program test_extended
  use mpi
  use firehose
  implicit none
  integer, parameter :: n = 4096
  integer(c_int8_t), allocatable, target, volatile :: b(:)
  integer(c_int8_t), allocatable, target :: src(:)
  integer :: ierr, me, np, right, left, i
  type(c_ptr) :: ctx, hsl, rb, part
  type(c_ptr), target :: sigw
  type(c_ptr), allocatable, target :: sigs(:)
  integer(c_int64_t), pointer :: words(:)
  integer(c_int64_t), target :: val, got
  integer(c_intptr_t) :: mine
  integer(c_intptr_t), allocatable :: addrs(:)
  integer(c_int64_t) :: h, v, hs(3)
  integer(c_int) :: rc
  complex(c_double_complex), target :: z(3), zsum(3)
  integer(c_int32_t), target :: flag(2), both(2)

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, me, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, np, ierr)
  call check(fh_init_comm_f(MPI_COMM_WORLD, c_null_ptr, ctx), "fh_init_comm_f")
  right = mod(me + 1, np)
  left = mod(me + np - 1, np)
  allocate (b(n), src(n), addrs(0:np - 1), sigs(0:np - 1))
  b = -1_c_int8_t
  src = int(me + 1, c_int8_t)
  mine = transfer(c_loc(b), mine)
  call MPI_Allgather(mine, 1, MPI_INTEGER8, addrs, 1, MPI_INTEGER8, MPI_COMM_WORLD, ierr)
  rb = transfer(addrs(right), rb)
  call MPI_Barrier(MPI_COMM_WORLD, ierr)

  ! An 8-byte value into b(1:8), a memset of b(101:1100), an access region with a put
  ! into b(2001:2100) and a memset_nbi of b(3001:3010).
  call check(fh_put_val(ctx, right, rb, int(me + 1, c_int64_t) * 1000_c_int64_t, 8_c_size_t), "fh_put_val")
  call check(fh_memset(ctx, right, off(100), me + 50, 1000_c_size_t), "fh_memset")
  call check(fh_begin_nbi_accessregion(ctx), "fh_begin_nbi_accessregion")
  call check(fh_put_nbi(ctx, right, off(2000), c_loc(src), 100_c_size_t), "fh_put_nbi")
  call check(fh_memset_nbi(ctx, right, off(3000), 7, 10_c_size_t), "fh_memset_nbi")
  call check(fh_end_nbi_accessregion(ctx, h), "fh_end_nbi_accessregion")
  call check(fh_wait(ctx, h), "fh_wait (region)")
  ! Three _nb memsets of b(3501:3600), completed with fh_test_some.
  do i = 1, 3
    call check(fh_memset_nb(ctx, right, off(3500 + 33 * (i - 1)), 9, 33_c_size_t, hs(i)), "fh_memset_nb")
  end do
  do while (any(hs /= FH_HANDLE_NULL))
    rc = fh_test_some(ctx, hs, 3_c_size_t)
    if (rc /= FH_OK .and. rc /= FH_NOT_READY) call check(rc, "fh_test_some")
  end do
  call MPI_Barrier(MPI_COMM_WORLD, ierr)

  call check(fh_get_val(ctx, right, rb, 8_c_size_t, v), "fh_get_val")
  if (v /= int(me + 1, c_int64_t) * 1000_c_int64_t) call fail("fh_get_val read a wrong value")
  do i = 101, 1100
    if (b(i) /= int(left + 50, c_int8_t)) call fail("fh_memset")
  end do
  do i = 2001, 2100
    if (b(i) /= int(left + 1, c_int8_t)) call fail("the region's put")
  end do
  do i = 3001, 3010
    if (b(i) /= 7_c_int8_t) call fail("the region's memset")
  end do
  do i = 3501, 3599
    if (b(i) /= 9_c_int8_t) call fail("fh_memset_nb")
  end do
  if (b(100) /= -1_c_int8_t .or. b(1101) /= -1_c_int8_t .or. b(3011) /= -1_c_int8_t &
      .or. b(3600) /= -1_c_int8_t) call fail("a byte outside the ranges changed")

  ! A handler-safe lock and a no-interrupt section, and their misuse.
  call check(fh_hsl_init(ctx, hsl), "fh_hsl_init")
  call check(fh_hsl_lock(hsl), "fh_hsl_lock")
  if (fh_hsl_trylock(hsl) /= FH_ERR_STATE) call fail("fh_hsl_trylock of a held lock")
  call check(fh_hsl_unlock(hsl), "fh_hsl_unlock")
  if (fh_hsl_unlock(hsl) /= FH_ERR_STATE) call fail("fh_hsl_unlock of a free lock")
  call check(fh_hold_interrupts(ctx), "fh_hold_interrupts")
  call check(fh_poll(ctx), "fh_poll in a section")
  call check(fh_resume_interrupts(ctx), "fh_resume_interrupts")
  if (fh_resume_interrupts(ctx) /= FH_ERR_STATE) call fail("fh_resume_interrupts without a hold")
  call check(fh_hsl_destroy(hsl), "fh_hsl_destroy")
  if (fh_put_val(ctx, right, rb, 1_c_int64_t, 3_c_size_t) /= FH_ERR_INVALID_ARG) call fail("width 3")

  ! Reductions on complex(8) and on logicals held as integer(4) (FH_LAND / FH_LOR).
  z = [cmplx(me, 1, c_double_complex), cmplx(1, -me, c_double_complex), (0.0_c_double, 2.0_c_double)]
  call check(fh_allreduce(ctx, c_loc(z), c_loc(zsum), 3_c_size_t, FH_CDOUBLE, FH_SUM), "fh_allreduce complex")
  if (zsum(1) /= cmplx(np * (np - 1) / 2, np, c_double_complex)) call fail("complex sum (1)")
  if (zsum(2) /= cmplx(np, -np * (np - 1) / 2, c_double_complex)) call fail("complex sum (2)")
  if (zsum(3) /= cmplx(0, 2 * np, c_double_complex)) call fail("complex sum (3)")
  flag = [merge(1_c_int32_t, 0_c_int32_t, me /= 0), 1_c_int32_t]
  call check(fh_allreduce(ctx, c_loc(flag), c_loc(both), 2_c_size_t, FH_INT32, FH_LAND), "fh_allreduce land")
  if (both(1) /= 0 .or. both(2) /= 1) call fail("logical and")
  flag = [merge(1_c_int32_t, 0_c_int32_t, me == np - 1), 0_c_int32_t]
  call check(fh_allreduce(ctx, c_loc(flag), c_loc(both), 2_c_size_t, FH_INT32, FH_LOR), "fh_allreduce lor")
  if (both(1) /= 1 .or. both(2) /= 0) call fail("logical or")

  ! notify counter: put my rank into the right neighbour's word 1 and add 1 to its word 0
  sigw = fh_malloc(ctx, 16_c_size_t)
  call c_f_pointer(sigw, words, [2])
  words = 0
  call check(fh_allgather(ctx, c_loc(sigw), int(c_sizeof(sigw), c_size_t), c_loc(sigs)), "fh_allgather (signal words)")
  call MPI_Barrier(MPI_COMM_WORLD, ierr)
  val = int(me, c_int64_t)
  call check(fh_put_signal(ctx, int(right, c_int), &
      transfer(transfer(sigs(right), 0_c_intptr_t) + 8_c_intptr_t, c_null_ptr), c_loc(val), 8_c_size_t, &
      sigs(right), 1_c_int64_t, FH_SIGNAL_ADD), "fh_put_signal")
  call check(fh_signal_wait_until(ctx, sigw, FH_CMP_GE, 1_c_int64_t, c_loc(got)), "fh_signal_wait_until")
  if (got /= 1 .or. words(2) /= left) call fail("put with signal")
  call MPI_Barrier(MPI_COMM_WORLD, ierr)
  call fh_free(ctx, sigw)

  ! a user-defined reduction: the maximum of (rank, 2*rank) pairs by their second part
  val = int(me, c_int64_t)
  call check(fh_allreduce_fn(ctx, c_loc(val), c_loc(got), 1_c_size_t, 8_c_size_t, &
      c_funloc(max_i64), c_null_ptr), "fh_allreduce_fn")
  if (got /= np - 1) call fail("user-defined reduction")

  ! fh_split: even and odd ranks form two parts; a sum over each part
  call check(fh_split(ctx, int(mod(me, 2), c_int), int(me, c_int), c_null_ptr, part), "fh_split")
  flag = [int(me, c_int32_t), 1_c_int32_t]
  call check(fh_allreduce(part, c_loc(flag), c_loc(both), 2_c_size_t, FH_INT32, FH_SUM), "fh_allreduce (part)")
  if (both(2) /= (np + 1 - mod(me, 2)) / 2 .or. fh_size(part) /= both(2)) call fail("size of the part")
  if (both(1) /= sum([(i, i = mod(me, 2), np - 1, 2)])) call fail("sum over the part")
  if (fh_rank(part) /= me / 2) call fail("rank in the part")
  call check(fh_finalize(part), "fh_finalize (part)")

  call MPI_Barrier(MPI_COMM_WORLD, ierr)
  call check(fh_finalize(ctx), "fh_finalize")
  if (me == 0) print '(a, i0, a)', "test_extended (Fortran): OK (np=", np, ")"
  call MPI_Finalize(ierr)

contains

  ! fh_reduce_fn interface: inout(i) = max(inout(i), input(i))
  subroutine max_i64(inout, input, count, user) bind(C)
    type(c_ptr), value :: inout, input, user
    integer(c_size_t), value :: count
    integer(c_int64_t), pointer :: a(:), b(:)
    if (c_associated(user)) return
    call c_f_pointer(inout, a, [count])
    call c_f_pointer(input, b, [count])
    a = max(a, b)
  end subroutine max_i64

  ! The right neighbour's b(k + 1).
  type(c_ptr) function off(k)
    integer, intent(in) :: k
    off = transfer(addrs(right) + int(k, c_intptr_t), c_null_ptr)
  end function off

  subroutine fail(what)
    character(len=*), intent(in) :: what
    write (0, '(a, i0, 2a)') "[rank ", me, "] test_extended FAIL: ", what
    call MPI_Abort(MPI_COMM_WORLD, 1, ierr)
  end subroutine fail

  subroutine check(rc, what)
    integer(c_int), intent(in) :: rc
    character(len=*), intent(in) :: what
    if (rc /= FH_OK) call fail(what // ": " // fh_strerror_str(rc) // " " // fh_last_error_str())
  end subroutine check
end program test_extended
