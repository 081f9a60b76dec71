! Derived types with allocatable components on remote images (the by-reference calls):
! a gather of variable-size allocatable components, puts into remote components,
! static array components, ALLOCATED() of a remote component, image-to-image copies,
! a rank-2 allocatable component taken into an unallocated array and into one of
! another shape (allocation on assignment: the result is indexed element by element).
program caf_derived
  use caf_check
  implicit none
  type :: bag
    integer :: n = 0
    real(8) :: m(3, 4) = 0
    integer, allocatable :: v(:)
    real, allocatable :: s
    real, allocatable :: g(:, :)
  end type
  type(bag) :: b[*]
  integer :: me, np, i, j, right
  integer, allocatable :: got(:)
  real(8) :: row(4)
  real :: sv, total
  real, allocatable :: g2(:, :), g3(:, :)

  me = this_image()
  np = num_images()
  right = merge(1, me + 1, me == np)
  ! image i owns a component of i*3 elements: sizes differ between images
  b%n = 3 * me
  allocate(b%v(3 * me))
  b%v = [(100 * me + i, i = 1, 3 * me)]
  b%m = reshape([(dble(10 * me + i), i = 1, 12)], [3, 4])
  if (mod(me, 2) == 1) allocate(b%s, source=real(me))
  allocate(b%g(2, 3))
  b%g = reshape([(real(10 * me + i), i = 1, 6)], [2, 3])
  sync all

  ! a rank-2 component into an unallocated array, read element by element (its
  ! descriptor's offset once assumed rank 1), then into an array of another shape
  g2 = b[right]%g
  total = 0
  do j = 1, 3
    do i = 1, 2
      total = total + g2(i, j)
    end do
  end do
  call check(total == sum([(real(10 * right + i), i = 1, 6)]), 'rank-2 component, indexed')
  call check(g2(2, 3) == real(10 * right + 6), 'rank-2 component, last element')
  allocate(g3(3, 2))
  g3 = b[right]%g
  call check(all(shape(g3) == [2, 3]), 'rank-2 component into another shape')
  call check(g3(1, 2) == real(10 * right + 3), 'rank-2 component into another shape, element')
  sync all

  ! gather every image's variable-size component
  do j = 1, np
    call check(b[j]%n == 3 * j, 'remote scalar component')
    got = b[j]%v                                  ! allocation on assignment
    call check(size(got) == 3 * j, 'size of the gathered component')
    call check(all(got == [(100 * j + i, i = 1, 3 * j)]), 'gathered component')
    call check(allocated(b[j]%s) .eqv. mod(j, 2) == 1, 'ALLOCATED of a remote component')
    if (mod(j, 2) == 1) then
      sv = b[j]%s
      call check(sv == real(j), 'remote allocatable scalar')
    end if
    row = b[j]%m(2, :)                            ! static array component, a row
    call check(all(row == [(dble(10 * j + 2 + 3 * i), i = 0, 3)]), 'row of a static component')
    call check(b[j]%v(2) == 100 * j + 2, 'one element of a remote component')
    got = b[j]%v(3 * j:1:-2)                      ! reversed, strided
    call check(all(got == [(100 * j + i, i = 3 * j, 1, -2)]), 'reversed section of a component')
  end do
  sync all

  ! put into the right neighbour's component, strided
  b[right]%v(1:3:2) = [-1, -2]
  b[right]%m(:, 4) = [7d0, 8d0, 9d0]
  sync all
  call check(b%v(1) == -1 .and. b%v(3) == -2 .and. b%v(2) == 100 * me + 2, 'put into a component')
  call check(all(b%m(:, 4) == [7d0, 8d0, 9d0]), 'put into a static component')

  sync all
  ! copy between two other images' components (sendget)
  if (np >= 2 .and. me == 1) b[2]%v(1:3) = b[1]%v(1:3)
  sync all
  if (np >= 2 .and. me == 2) call check(b%v(1) == -1 .and. b%v(2) == 102, 'image-to-image copy')

  deallocate(b%v)
  sync all
  if (me == 1) print '(a,i0,a)', 'caf_derived: ', np, ' images passed'
end program
