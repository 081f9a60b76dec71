! A coarray program built against the installed libcaf_firehose (pkg-config
! firehose-caf, or the fhcaf wrapper) and run with fhcafrun.
program consumer_caf
  implicit none
  integer :: x[*], s
  x = this_image()
  sync all
  s = x[merge(1, this_image() + 1, this_image() == num_images())]
  call co_sum(x)
  if (x /= num_images() * (num_images() + 1) / 2 .or. s < 1) error stop 1
  if (this_image() == 1) print '(a,i0,a)', 'PASS coarray consumer on ', num_images(), ' images'
end program
