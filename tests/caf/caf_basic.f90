! Puts and gets as a stranger writes them: scalars, sections with strides (also
! negative), vector subscripts, kind conversion, characters, allocatable coarrays,
! SYNC ALL / SYNC IMAGES / SYNC MEMORY. Self-checking; any image's failure is ERROR STOP.
program caf_basic
  use caf_check
  implicit none
  integer :: me, np, right, left, i, j
  integer :: x[*], a(10, 10)[*], idx(3), v(10)
  real(8) :: d(8)[*]
  real(8), allocatable :: big(:)[:]
  character(len=8) :: c[*]
  integer(8) :: k8[*]

  me = this_image()
  np = num_images()
  right = merge(1, me + 1, me == np)
  left = merge(np, me - 1, me == 1)

  ! scalar put to the right neighbour, read back after SYNC ALL
  x = -1
  sync all
  x[right] = 100 + me
  sync all
  call check(x == 100 + left, 'scalar put')
  call check(x[right] == 100 + me, 'scalar get')

  ! 2-D array: a strided section put into the neighbour, then a column get
  a = 0
  sync all
  a(1:10:2, 3)[right] = [(1000 * me + i, i = 1, 5)]
  a(:, 5)[right] = [(i * me, i = 1, 10)]
  a(10:1:-1, 7)[right] = [(i, i = 1, 10)]       ! negative stride on the remote side
  sync all
  do i = 1, 5
    call check(a(2 * i - 1, 3) == 1000 * left + i, 'strided put')
    call check(a(2 * i, 3) == 0, 'strided put left gaps alone')
  end do
  call check(all(a(:, 5) == [(i * left, i = 1, 10)]), 'column put')
  call check(all(a(:, 7) == [(11 - i, i = 1, 10)]), 'reversed put')
  v = a(:, 5)[left]
  call check(all(v == [(i * ((left + np - 2) - ((left + np - 2) / np) * np + 1), i = 1, 10)]), &
             'column get')
  v(1:5) = a(2, 1:9:2)[right]                       ! a row: stride 10 elements
  call check(v(1) == 0 .and. v(2) == 0 .and. v(3) == 2 * me .and. v(4) == 9, 'row get')
  v(1:10) = a(10:1:-1, 5)[right]
  call check(all(v == [(i * me, i = 10, 1, -1)]), 'reversed get')

  ! vector subscripts
  sync all
  idx = [2, 5, 9]
  a(idx, 1)[right] = [7, 8, 9]
  sync all
  call check(a(2, 1) == 7 .and. a(5, 1) == 8 .and. a(9, 1) == 9, 'vector put')
  v(1:3) = a(idx, 5)[right]
  call check(all(v(1:3) == [2 * me, 5 * me, 9 * me]), 'vector get')

  ! kind conversion both ways
  d = 0
  sync all
  d(1:3)[right] = [1, 2, 3]                 ! integer -> real(8)
  k8[right] = 2_8**40 + me
  sync all
  call check(all(d(1:3) == [1d0, 2d0, 3d0]), 'integer to real(8) put')
  call check(k8 == 2_8**40 + left, 'integer(8) put')
  i = nint(d(2)[right] * 10)                ! real(8) -> integer
  call check(i == 20, 'real(8) to integer get')

  ! characters: shorter right-hand side is blank-padded
  c = 'xxxxxxxx'
  sync all
  c[right] = 'hi'
  sync all
  call check(c == 'hi      ', 'character put with padding')

  ! allocatable coarray, a large transfer (beyond the staging threshold; with
  ! FH_HEAP_SIZE=4M beyond the heap's first region)
  allocate(big(600000)[*])
  big = me
  sync all
  big(:)[right] = [(dble(i), i = 1, 600000)]
  sync all
  call check(big(1) == 1 .and. big(600000) == 600000, 'big put')
  big(1:600000:3) = big(1:600000:3)[left]
  call check(big(4) == 4, 'big strided get')
  deallocate(big)

  ! SYNC IMAGES with skewed arrival: image 1 arrives late
  if (me == 1) call spin(20000000)
  if (np > 1) then
    if (me == 1) then
      sync images(*)
    else
      sync images(1)
    end if
  end if
  x = 0
  sync all
  if (me /= 1) x[1] = 1
  sync memory
  sync all
  if (me == 1) call check(x == merge(1, 0, np > 1), 'put visible after sync memory + sync all')

  ! repeated neighbour syncs
  do j = 1, 50
    x[right] = j
    if (left == right) then
      sync images(left)
    else
      sync images([left, right])
    end if
    call check(x == j, 'sync images ring')
    if (left == right) then
      sync images(left)
    else
      sync images([left, right])
    end if
  end do
  sync all
  if (me == 1) print '(a,i0,a)', 'caf_basic: ', np, ' images passed'
contains
  subroutine spin(n)
    integer, intent(in) :: n
    integer :: s
    real :: r
    r = 0
    do s = 1, n
      r = r + sin(real(s))
    end do
    if (r > 1e30) print *, r
  end subroutine
end program
