! CO_SUM / CO_MIN / CO_MAX / CO_BROADCAST / CO_REDUCE, with and without RESULT_IMAGE,
! on contiguous and non-contiguous arguments, integer kinds, reals, complex,
! characters, and user functions of several types.
program caf_coll
  use caf_check
  implicit none
  integer :: me, np, i, a(6, 4), expect
  integer(1) :: i1(3)
  integer(2) :: i2
  integer(8) :: i8
  real :: r(5)
  real(8) :: d
  complex(8) :: z
  character(len=6) :: word
  logical :: l
  integer :: big(262144)

  me = this_image()
  np = num_images()

  ! non-contiguous CO_SUM: every other row of a 2-D array
  a = me
  call co_sum(a(1:6:2, :))
  call check(all(a(1:6:2, :) == np * (np + 1) / 2) .and. all(a(2:6:2, :) == me), &
             'CO_SUM of a strided section')
  a = me
  call co_sum(a(2, :), result_image=1)
  if (me == 1) call check(all(a(2, :) == np * (np + 1) / 2), 'CO_SUM with RESULT_IMAGE')
  call check(all(a(1, :) == me), 'CO_SUM leaves the rest alone')

  i1 = int(me, 1)
  call co_sum(i1)
  call check(all(i1 == np * (np + 1) / 2), 'CO_SUM integer(1)')
  i2 = int(-me, 2)
  call co_min(i2)
  call check(i2 == -np, 'CO_MIN integer(2)')
  i8 = 2_8**40 * me
  call co_max(i8)
  call check(i8 == 2_8**40 * np, 'CO_MAX integer(8)')
  r = [(real(me * i), i = 1, 5)]
  call co_max(r)
  call check(all(r == [(real(np * i), i = 1, 5)]), 'CO_MAX real')
  d = 1d0 / me
  call co_sum(d, result_image=np)
  if (me == np) call check(abs(d - sum([(1d0 / i, i = 1, np)])) < 1d-12, 'CO_SUM real(8) at the last image')
  z = cmplx(me, -me, 8)
  call co_sum(z)
  call check(z == cmplx(np * (np + 1) / 2, -np * (np + 1) / 2, 8), 'CO_SUM complex(8)')

  ! characters: min and max compare as Fortran does
  word = achar(iachar('a') + me) // 'zzzz'
  call co_min(word)
  call check(word == 'bzzzz', 'CO_MIN character')
  word = achar(iachar('a') + me) // 'zzzz'
  call co_max(word, result_image=1)
  if (me == 1) call check(word == achar(iachar('a') + np) // 'zzzz', 'CO_MAX character')

  ! 1 MiB CO_BROADCAST from the last image
  big = me
  call co_broadcast(big, source_image=np)
  call check(all(big == np), 'CO_BROADCAST of 1 MiB')
  word = 'hello'
  if (me /= 1) word = ''
  call co_broadcast(word, 1)
  call check(word == 'hello', 'CO_BROADCAST character')

  ! CO_REDUCE: user functions, applied in image order
  expect = 1
  do i = 2, np
    expect = expect * i
  end do
  i = me
  call co_reduce(i, mult)
  call check(i == expect, 'CO_REDUCE integer product')
  d = me
  call co_reduce(d, dmax, result_image=1)
  if (me == 1) call check(d == np, 'CO_REDUCE real(8) with RESULT_IMAGE')
  l = me /= 2
  call co_reduce(l, land)
  call check(l .eqv. np < 2, 'CO_REDUCE logical')
  a = me
  call co_reduce(a(:, 2), mult)
  call check(all(a(:, 2) == expect), 'CO_REDUCE on an array')

  sync all
  if (me == 1) print '(a,i0,a)', 'caf_coll: ', np, ' images passed'
contains
  pure function mult(x, y) result(p)
    integer, intent(in) :: x, y
    integer :: p
    p = x * y
  end function
  pure function dmax(x, y) result(p)
    real(8), intent(in) :: x, y
    real(8) :: p
    p = max(x, y)
  end function
  pure function land(x, y) result(p)
    logical, intent(in) :: x, y
    logical :: p
    p = x .and. y
  end function
end program
