! make demo: a Co-array Fortran program on libcaf_firehose (gfortran -fcoarray=lib).
! 1-D heat diffusion on 4096 points split across the images: every step writes its
! edge values into the neighbours' ghost cells (coarray puts), synchronises with the
! two neighbours only (SYNC IMAGES), and updates; CO_SUM gives the total heat, which
! must be conserved. Image 1 then gathers the whole field (coarray gets) and checks
! it against the same computation done serially. Prints one line of results.
program coarray_heat
  use iso_fortran_env, only: int64
  implicit none
  integer, parameter :: ntot = 4096, steps = 2000
  real(8), parameter :: k = 0.25d0
  real(8), allocatable :: u(:)[:], unew(:), whole(:), serial(:), snew(:)
  integer :: me, np, n, lo, i, s, left, right
  real(8) :: heat0, heat, err
  integer(int64) :: t0, t1, rate

  me = this_image()
  np = num_images()
  n = ntot / np                                  ! the last image takes the remainder
  lo = (me - 1) * n
  if (me == np) n = ntot - lo
  allocate(u(0:ntot / np + ntot)[*], unew(n))
  left = me - 1
  right = me + 1
  u = 0
  do i = 1, n
    u(i) = init(lo + i)
  end do
  heat0 = sum(u(1:n))
  call co_sum(heat0)
  sync all
  call system_clock(t0, rate)
  do s = 1, steps
    if (left >= 1) u(ntot / np + ntot)[left] = u(1)    ! my first value: left's right ghost
    if (right <= np) u(0)[right] = u(n)                ! my last value: right's left ghost
    call sync_neighbours()
    do i = 1, n
      unew(i) = u(i) + k * (merge(u(i - 1), u(i), i > 1 .or. left >= 1) - 2 * u(i) + &
                            merge(u(i + 1), rghost(), i < n))
    end do
    call sync_neighbours()                             ! they have read my edges
    u(1:n) = unew
  end do
  call system_clock(t1)
  heat = sum(u(1:n))
  call co_sum(heat)
  sync all
  if (me == 1) then
    allocate(whole(ntot), serial(0:ntot + 1), snew(ntot))
    do i = 1, np                                       ! gather with coarray gets
      whole((i - 1) * (ntot / np) + 1:merge(ntot, i * (ntot / np), i == np)) = &
          u(1:merge(ntot - (np - 1) * (ntot / np), ntot / np, i == np))[i]
    end do
    serial(1:ntot) = [(init(i), i = 1, ntot)]
    do s = 1, steps
      serial(0) = serial(1)
      serial(ntot + 1) = serial(ntot)
      snew = serial(1:ntot) + k * (serial(0:ntot - 1) - 2 * serial(1:ntot) + serial(2:ntot + 1))
      serial(1:ntot) = snew
    end do
    err = maxval(abs(whole - serial(1:ntot)))
    print '(a,i0,a,i0,a,i0,a,es9.2,a,es9.2,a,f0.1,a)', 'coarray_heat: ', np, ' images, ', ntot, &
        ' points, ', steps, ' steps: heat drift ', abs(heat - heat0) / heat0, &
        ', max error vs serial ', err, ', ', 1d6 * dble(t1 - t0) / dble(rate) / steps, ' us/step'
    if (err > 1d-12 .or. abs(heat - heat0) > 1d-9 * heat0) error stop 'coarray_heat: WRONG'
  end if
contains
  subroutine sync_neighbours()
    if (np == 1) return
    if (left < 1) then
      sync images(right)
    else if (right > np) then
      sync images(left)
    else
      sync images([left, right])
    end if
  end subroutine
  pure real(8) function init(g)
    integer, intent(in) :: g
    init = merge(100d0, 0d0, 3 * g > ntot .and. 3 * g <= 2 * ntot)
  end function
  real(8) function rghost()
    if (right <= np) then
      rghost = u(ntot / np + ntot)
    else
      rghost = u(n)
    end if
  end function
end program
