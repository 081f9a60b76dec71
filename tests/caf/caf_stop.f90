! STOP on one image while the others continue: their next SYNC ALL with STAT= reports
! STAT_STOPPED_IMAGE (and does not hang), STOPPED_IMAGES / IMAGE_STATUS name the
! image, SYNC IMAGES with it reports it, ALLOCATE of a coarray with STAT= reports it
! (it once waited for the stopped image for ever), and the job still ends with exit
! status 0.
program caf_stop
  use caf_check
  use iso_fortran_env, only: stat_stopped_image
  implicit none
  integer :: me, np, s, x[*], i
  integer, allocatable :: gone(:)
  integer, allocatable :: y(:)[:]
  real :: r

  me = this_image()
  np = num_images()
  x = 0
  call random_init(repeatable=.true., image_distinct=.true.)
  call random_number(r)
  sync all
  if (np == 1) then
    print '(a)', 'caf_stop: 1 image passed'
    stop
  end if
  if (me == np) stop                   ! the last image leaves early, quietly
  do i = 1, 3
    sync all(stat=s)
    if (s == stat_stopped_image) exit
    call check(s == 0, 'SYNC ALL before the stop is seen')
  end do
  call check(s == stat_stopped_image, 'SYNC ALL reports STAT_STOPPED_IMAGE')
  gone = stopped_images()
  call check(size(gone) == 1, 'STOPPED_IMAGES has one image')
  call check(gone(1) == np, 'STOPPED_IMAGES names it')
  call check(image_status(np) == stat_stopped_image, 'IMAGE_STATUS')
  call check(size(failed_images()) == 0, 'no failed images')
  if (me == 1) then
    sync images(np, stat=s)
    call check(s == stat_stopped_image, 'SYNC IMAGES with a stopped image')
  end if
  allocate(y(10)[*], stat=s)
  call check(s == stat_stopped_image, 'ALLOCATE of a coarray with a stopped image')
  ! the live images keep working together
  if (me /= 1) x[1] = 1
  sync all(stat=s)
  call check(s == stat_stopped_image, 'later SYNC ALL reports it again')
  if (me == 1) then
    call check(x == 1 .or. np == 2, 'puts among the live images')
    print '(a,i0,a)', 'caf_stop: ', np, ' images passed'
  end if
end program
